package cuda

import (
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

// sentinels maps a cudaError_t to the alloc sentinel it means here
// (gpurt.Sentinels). The meanings are
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
var sentinels = gpurt.NewSentinels(gpurt.Codes{
	Unavailable: []int{errInitializationError, errCudartUnloading, errStubLibrary, errInsufficientDriver,
		errCallRequiresNewerDriver, errDevicesUnavailable, errNoDevice, errDeviceNotLicensed,
		errSoftwareValidityNotEstabl, errStartupFailure, errSystemNotReady,
		errSystemDriverMismatch, errCompatNotSupportedOnDevice},
	InvalidValue: []int{errInvalidValue, errInvalidDevicePointer, errInvalidMemcpyDirection, errInvalidDevice,
		errInvalidResourceHandle, errIllegalState},
})

// Error is a failed CUDA runtime call: Op (what the driver was doing,
// "malloc async 4096 B"), Call (the runtime function,
// "cudaMallocFromPoolAsync"), Code (the cudaError_t) and Text
// (cudaGetErrorString's), the fields gpurt.CallError declares. It matches
// (errors.Is) the alloc sentinel its code maps to, and errors.As gives the
// numeric code.
type Error gpurt.CallError

func (e *Error) Error() string {
	return e.call().Message(fmt.Sprintf("%v: cuda: %s: %s returned %d (%s)", e.Unwrap(), e.Op, e.Call, e.Code, e.Text))
}

// Unwrap lets errors.Is find the sentinel.
func (e *Error) Unwrap() error { return e.call().Sentinel(sentinels) }

func (e *Error) call() *gpurt.CallError { return (*gpurt.CallError)(e) }

// errf is a backend error that did not come from a runtime call.
func errf(sentinel error, format string, args ...any) error {
	return vendor.Errf(sentinel, format, args...)
}
