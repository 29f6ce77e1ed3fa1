package cuda

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// cudaError_t values this backend maps to a sentinel beyond the codes both
// runtimes share (gpurt's Code constants) (driver_types.h: enum cudaError). Any other non-zero code is ErrDriver; the code and the
// runtime's own text are always kept in the message.
const (
	errInvalidValue               = 1
	errInitializationError        = 3
	errCudartUnloading            = 4
	errInvalidDevicePointer       = 17 // deprecated since 10.1, still mapped
	errInvalidMemcpyDirection     = 21
	errStubLibrary                = 34
	errInsufficientDriver         = 35
	errCallRequiresNewerDriver    = 36
	errDevicesUnavailable         = 46
	errNoDevice                   = 100
	errInvalidDevice              = 101
	errDeviceNotLicensed          = 102
	errSoftwareValidityNotEstabl  = 103
	errStartupFailure             = 127
	errInvalidResourceHandle      = 400
	errIllegalState               = 401
	errSystemNotReady             = 802
	errSystemDriverMismatch       = 803
	errCompatNotSupportedOnDevice = 804
	errTimeout                    = 909
)

// sentinelFor maps a cudaError_t to the alloc sentinel it means here,
// through the table below (gpurt.Sentinels). The meanings are
// driver_types.h's enum cudaError comments (quoted in
// docs/cuda-backend.md, with the table). The out-of-memory and capture
// codes (2, 900-908, 910), the same in both runtimes, are gpurt's (its
// Code constants say what each means); CUDA's own:
//
//   - 3, 4, 34, 35, 36, 46, 100, 102, 103, 127, 802, 803, 804: no usable
//     driver or device: the backend is unavailable.
//   - 1, 17, 21, 101, 400, 401: a bad argument or handle.
//   - 801 (not supported), 909 (timeout) and everything else: a driver
//     error.
func sentinelFor(code int) error { return sentinels.For(code) }

var sentinels = gpurt.NewSentinels(gpurt.Codes{
	Unavailable: []int{errInitializationError, errCudartUnloading, errStubLibrary, errInsufficientDriver,
		errCallRequiresNewerDriver, errDevicesUnavailable, errNoDevice, errDeviceNotLicensed,
		errSoftwareValidityNotEstabl, errStartupFailure, errSystemNotReady,
		errSystemDriverMismatch, errCompatNotSupportedOnDevice},
	InvalidValue: []int{errInvalidValue, errInvalidDevicePointer, errInvalidMemcpyDirection, errInvalidDevice,
		errInvalidResourceHandle, errIllegalState},
})

// Error is a failed CUDA runtime call. It matches (errors.Is) the alloc
// sentinel its code maps to, and errors.As gives the numeric code.
type Error struct {
	Op   string // what the driver was doing ("malloc async 4096 B")
	Call string // the runtime function ("cudaMallocFromPoolAsync")
	Code int    // cudaError_t
	Text string // cudaGetErrorString(Code)

	// kind overrides the code's sentinel where the call gives the code a
	// more precise meaning (801 from cudaStreamBeginCapture: no graphs).
	kind error
	// why explains the code where the driver's version does ("no CUDA
	// driver is installed ..."); empty otherwise.
	why string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%v: cuda: %s: %s returned %d (%s)", e.Unwrap(), e.Op, e.Call, e.Code, e.Text)
	if e.why != "" {
		msg += ": " + e.why
	}
	return msg
}

// Unwrap lets errors.Is find the sentinel.
func (e *Error) Unwrap() error {
	if e.kind != nil {
		return e.kind
	}
	return sentinelFor(e.Code)
}

// errf is a backend error that did not come from a runtime call.
func errf(sentinel error, format string, args ...any) error {
	return vendor.Errf(sentinel, format, args...)
}

// codeOf returns the cudaError_t inside err, or 0.
func codeOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
