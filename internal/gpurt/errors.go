package gpurt

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ErrWrongThread is the sentinel of a capture ended on another thread than
// the one that began it (908 in both runtimes): it matches both
// driver.ErrCaptureWrongThread and driver.ErrCaptureIllegalOp.
var ErrWrongThread = fmt.Errorf("%w (%w)", driver.ErrCaptureWrongThread, driver.ErrCaptureIllegalOp)

// Error codes with the same value and meaning in both runtimes: enum
// cudaError (driver_types.h) and enum hipError_t (hip_runtime_api.h, whose
// comments on the capture codes repeat CUDA's; hip's
// TestSharedABIMatchesHeader reads it). The meanings, and the sentinel
// each maps to (Sentinels):
//
//   - 2: out of memory.
//   - 900 ("the operation is not permitted when the stream is capturing"),
//     906 ("would have resulted in a disallowed implicit dependency on a
//     current capture sequence from cudaStreamLegacy"), 907 ("not
//     permitted on an event which was last recorded in a capturing
//     stream"): the call was illegal because a capture is active. Whether
//     the runtime also invalidated the capture depends on the call; alloc
//     reads the stream's status again after such a refusal.
//   - 908 ("a stream capture sequence not initiated with
//     cudaStreamCaptureModeRelaxed ... was passed to cudaStreamEndCapture
//     in a different thread"): ErrWrongThread. The capture is still
//     active, not invalidated.
//   - 901 ("invalidated due to a previous error"): the capture was
//     invalidated.
//   - 902 (merge), 903 (unmatched: "not initiated in this stream"), 904
//     (unjoined fork), 905 (isolation), 910 (graph exec update failure):
//     capture misuse that leaves nothing usable: invalidated; the code
//     says which.
//   - 600 (not ready), 704 (peer access already enabled) and 801 (not
//     supported) have no sentinel of their own (driver.ErrDriver, or the
//     vendor's default); the shared paths act on them.
const (
	CodeOutOfMemory              = 2   // cudaErrorMemoryAllocation, hipErrorOutOfMemory
	CodeNotReady                 = 600 // cudaErrorNotReady, hipErrorNotReady: a stream query
	CodePeerAccessAlreadyEnabled = 704 // enabling peer access a second time (success for EnablePeerAccess)
	CodeNotSupported             = 801 // from begin capture: this device cannot capture

	CodeStreamCaptureUnsupported = 900
	CodeStreamCaptureInvalidated = 901
	CodeStreamCaptureMerge       = 902
	CodeStreamCaptureUnmatched   = 903
	CodeStreamCaptureUnjoined    = 904
	CodeStreamCaptureIsolation   = 905
	CodeStreamCaptureImplicit    = 906
	CodeCapturedEvent            = 907
	CodeStreamCaptureWrongThread = 908
	CodeGraphExecUpdateFailure   = 910
)

// Codes lists, per sentinel, the codes of one runtime that mean it beyond
// the shared ones above: the vendor's data, from its header's comments.
type Codes struct {
	Unavailable   []int // driver.ErrBackendUnavailable: no usable driver or device
	InvalidValue  []int // driver.ErrInvalidValue: a bad argument, handle or state
	DriverDefault error // every other code; nil means driver.ErrDriver
}

// Sentinels maps an error code to the alloc sentinel it means.
type Sentinels struct {
	m   map[int]error
	def error
}

// NewSentinels builds the table: the shared codes, then the vendor's. A
// code listed under two sentinels is a bug in the vendor's data: it
// panics at package initialization.
func NewSentinels(c Codes) *Sentinels {
	s := &Sentinels{m: map[int]error{}, def: c.DriverDefault}
	if s.def == nil {
		s.def = driver.ErrDriver
	}
	for _, g := range []struct {
		codes []int
		err   error
	}{
		{[]int{CodeOutOfMemory}, driver.ErrOutOfMemory},
		{[]int{CodeStreamCaptureUnsupported, CodeStreamCaptureImplicit, CodeCapturedEvent}, driver.ErrCaptureIllegalOp},
		{[]int{CodeStreamCaptureWrongThread}, ErrWrongThread},
		{[]int{CodeStreamCaptureInvalidated, CodeStreamCaptureMerge, CodeStreamCaptureUnmatched,
			CodeStreamCaptureUnjoined, CodeStreamCaptureIsolation, CodeGraphExecUpdateFailure}, driver.ErrCaptureInvalidated},
		{c.Unavailable, driver.ErrBackendUnavailable},
		{c.InvalidValue, driver.ErrInvalidValue},
	} {
		for _, code := range g.codes {
			if prev, dup := s.m[code]; dup {
				panic(fmt.Sprintf("gpurt: code %d mapped to %v and %v", code, prev, g.err))
			}
			s.m[code] = g.err
		}
	}
	return s
}

// For is the sentinel code means.
func (s *Sentinels) For(code int) error {
	if err, ok := s.m[code]; ok {
		return err
	}
	return s.def
}

// CallError is a failed runtime call: the fields of the vendor packages'
// Error types (each declared `type Error gpurt.CallError`, with its own
// message format), so both keep the same facts and map them to a
// sentinel the same way. Runtime.Error builds it.
type CallError struct {
	Op   string // what the driver was doing ("malloc async 4096 B")
	Call string // the runtime function ("cudaMallocFromPoolAsync")
	Code int    // the runtime's error code (cudaError_t, hipError_t)
	Text string // the runtime's error string for Code

	// kind overrides the code's sentinel where the call gives the code a
	// more precise meaning (801 from begin capture: no graphs).
	kind error
	// why explains the code where the library's version does ("no CUDA
	// driver is installed ..."); empty otherwise.
	why string
}

// Sentinel is the alloc sentinel e matches: its kind, else what s maps
// its code to. The vendor's Error.Unwrap.
func (e *CallError) Sentinel(s *Sentinels) error {
	if e.kind != nil {
		return e.kind
	}
	return s.For(e.Code)
}

// Message is head, the vendor's words for e, followed by the explanation
// of the code, if any. The vendor's Error.Error.
func (e *CallError) Message(head string) string {
	if e.why != "" {
		return head + ": " + e.why
	}
	return head
}
