package hip

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// hipError_t values this package maps beyond the codes both runtimes share
// (gpurt's Code constants) (hip_runtime_api.h: enum hipError_t, ROCm
// 5.2.3). Codes and names are the header's; deprecated
// aliases (hipErrorMemoryAllocation, ...) share their code with the
// current name. TestErrorTableMatchesHeader compares this table with the
// installed header.
const (
	errInvalidValue            = 1
	errNotInitialized          = 3
	errDeinitialized           = 4
	errInvalidPitchValue       = 12
	errInvalidSymbol           = 13
	errInvalidDevicePointer    = 17
	errInvalidMemcpyDirection  = 21
	errInsufficientDriver      = 35
	errNoDevice                = 100
	errInvalidDevice           = 101
	errInvalidContext          = 201
	errInvalidHandle           = 400
	errIllegalState            = 401
	errHostMemoryAlreadyReg    = 712
	errHostMemoryNotRegistered = 713
)

// errorName is every hipError_t of the header: its name, and its
// deprecated aliases.
type errorName struct {
	name    string
	aliases []string
}

var errorNames = map[int]errorName{
	0:    {"hipSuccess", nil},
	1:    {"hipErrorInvalidValue", nil},
	2:    {"hipErrorOutOfMemory", []string{"hipErrorMemoryAllocation"}},
	3:    {"hipErrorNotInitialized", []string{"hipErrorInitializationError"}},
	4:    {"hipErrorDeinitialized", nil},
	5:    {"hipErrorProfilerDisabled", nil},
	6:    {"hipErrorProfilerNotInitialized", nil},
	7:    {"hipErrorProfilerAlreadyStarted", nil},
	8:    {"hipErrorProfilerAlreadyStopped", nil},
	9:    {"hipErrorInvalidConfiguration", nil},
	12:   {"hipErrorInvalidPitchValue", nil},
	13:   {"hipErrorInvalidSymbol", nil},
	17:   {"hipErrorInvalidDevicePointer", nil},
	21:   {"hipErrorInvalidMemcpyDirection", nil},
	35:   {"hipErrorInsufficientDriver", nil},
	52:   {"hipErrorMissingConfiguration", nil},
	53:   {"hipErrorPriorLaunchFailure", nil},
	98:   {"hipErrorInvalidDeviceFunction", nil},
	100:  {"hipErrorNoDevice", nil},
	101:  {"hipErrorInvalidDevice", nil},
	200:  {"hipErrorInvalidImage", nil},
	201:  {"hipErrorInvalidContext", nil},
	202:  {"hipErrorContextAlreadyCurrent", nil},
	205:  {"hipErrorMapFailed", []string{"hipErrorMapBufferObjectFailed"}},
	206:  {"hipErrorUnmapFailed", nil},
	207:  {"hipErrorArrayIsMapped", nil},
	208:  {"hipErrorAlreadyMapped", nil},
	209:  {"hipErrorNoBinaryForGpu", nil},
	210:  {"hipErrorAlreadyAcquired", nil},
	211:  {"hipErrorNotMapped", nil},
	212:  {"hipErrorNotMappedAsArray", nil},
	213:  {"hipErrorNotMappedAsPointer", nil},
	214:  {"hipErrorECCNotCorrectable", nil},
	215:  {"hipErrorUnsupportedLimit", nil},
	216:  {"hipErrorContextAlreadyInUse", nil},
	217:  {"hipErrorPeerAccessUnsupported", nil},
	218:  {"hipErrorInvalidKernelFile", nil},
	219:  {"hipErrorInvalidGraphicsContext", nil},
	300:  {"hipErrorInvalidSource", nil},
	301:  {"hipErrorFileNotFound", nil},
	302:  {"hipErrorSharedObjectSymbolNotFound", nil},
	303:  {"hipErrorSharedObjectInitFailed", nil},
	304:  {"hipErrorOperatingSystem", nil},
	400:  {"hipErrorInvalidHandle", []string{"hipErrorInvalidResourceHandle"}},
	401:  {"hipErrorIllegalState", nil},
	500:  {"hipErrorNotFound", nil},
	600:  {"hipErrorNotReady", nil},
	700:  {"hipErrorIllegalAddress", nil},
	701:  {"hipErrorLaunchOutOfResources", nil},
	702:  {"hipErrorLaunchTimeOut", nil},
	704:  {"hipErrorPeerAccessAlreadyEnabled", nil},
	705:  {"hipErrorPeerAccessNotEnabled", nil},
	708:  {"hipErrorSetOnActiveProcess", nil},
	709:  {"hipErrorContextIsDestroyed", nil},
	710:  {"hipErrorAssert", nil},
	712:  {"hipErrorHostMemoryAlreadyRegistered", nil},
	713:  {"hipErrorHostMemoryNotRegistered", nil},
	719:  {"hipErrorLaunchFailure", nil},
	720:  {"hipErrorCooperativeLaunchTooLarge", nil},
	801:  {"hipErrorNotSupported", nil},
	900:  {"hipErrorStreamCaptureUnsupported", nil},
	901:  {"hipErrorStreamCaptureInvalidated", nil},
	902:  {"hipErrorStreamCaptureMerge", nil},
	903:  {"hipErrorStreamCaptureUnmatched", nil},
	904:  {"hipErrorStreamCaptureUnjoined", nil},
	905:  {"hipErrorStreamCaptureIsolation", nil},
	906:  {"hipErrorStreamCaptureImplicit", nil},
	907:  {"hipErrorCapturedEvent", nil},
	908:  {"hipErrorStreamCaptureWrongThread", nil},
	910:  {"hipErrorGraphExecUpdateFailure", nil},
	999:  {"hipErrorUnknown", nil},
	1052: {"hipErrorRuntimeMemory", nil},
	1053: {"hipErrorRuntimeOther", nil},
	1054: {"hipErrorTbd", nil},
}

// codeName is the header's name for a code, or "hipError(N)" for a code
// the installed header does not list (a newer runtime's).
func codeName(code int) string {
	if n, ok := errorNames[code]; ok {
		return n.name
	}
	return fmt.Sprintf("hipError(%d)", code)
}

// describe turns a name into words: "hipErrorNoDevice" -> "no device".
func describe(code int) string {
	n, ok := errorNames[code]
	if !ok {
		return "unknown error"
	}
	words := strings.TrimPrefix(strings.TrimPrefix(n.name, "hipError"), "hip")
	var b strings.Builder
	for i, r := range words {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte(' ')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// sentinels maps a hipError_t to the alloc sentinel it means here
// (gpurt.Sentinels). The meanings are the
// header's comments on enum hipError_t (docs/hip-backend.md has the
// table). The out-of-memory and capture codes (2, 900-908, 910), whose
// comments repeat CUDA's, are gpurt's (its Code constants say what each
// means); HIP's own:
//
//   - 3 (not initialized), 4 (deinitialized), 35 (insufficient driver),
//     100 (no device): no usable runtime or device: the backend is
//     unavailable.
//   - 1, 12, 13, 17, 21, 101, 201, 400, 401, 712, 713: a bad argument,
//     handle or state.
//   - 801 (not supported) and everything else: a driver error.
var sentinels = gpurt.NewSentinels(gpurt.Codes{
	Unavailable: []int{errNotInitialized, errDeinitialized, errInsufficientDriver, errNoDevice},
	InvalidValue: []int{errInvalidValue, errInvalidPitchValue, errInvalidSymbol, errInvalidDevicePointer,
		errInvalidMemcpyDirection, errInvalidDevice, errInvalidContext, errInvalidHandle,
		errIllegalState, errHostMemoryAlreadyReg, errHostMemoryNotRegistered},
})

// Error is a failed HIP runtime call: Op (what the driver was doing,
// "malloc async 4096 B"), Call (the runtime function,
// "hipMallocFromPoolAsync"), Code (the hipError_t) and Text
// (hipGetErrorString's: in 5.2.3 the name again), the fields
// gpurt.CallError declares. It matches (errors.Is) the alloc sentinel its
// code maps to, and errors.As gives the numeric code. Its text names the
// code both ways: "no device (hipErrorNoDevice, 100)".
type Error gpurt.CallError

func (e *Error) Error() string {
	msg := fmt.Sprintf("%v: hip: %s: %s: %s (%s, %d)", e.Unwrap(), e.Op, e.Call, describe(e.Code), codeName(e.Code), e.Code)
	if e.Text != "" && e.Text != codeName(e.Code) {
		msg += fmt.Sprintf(" %q", e.Text) // a runtime that explains its codes (newer ROCm)
	}
	return e.call().Message(msg)
}

// Unwrap lets errors.Is find the sentinel.
func (e *Error) Unwrap() error { return e.call().Sentinel(sentinels) }

func (e *Error) call() *gpurt.CallError { return (*gpurt.CallError)(e) }

// errf is a backend error that did not come from a runtime call.
func errf(sentinel error, format string, args ...any) error {
	return vendor.Errf(sentinel, format, args...)
}
