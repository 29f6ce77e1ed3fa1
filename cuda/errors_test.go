package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

func TestErrorMapping(t *testing.T) {
	want := map[int]error{
		1: alloc.ErrInvalidValue, 17: alloc.ErrInvalidValue, 21: alloc.ErrInvalidValue, 101: alloc.ErrInvalidValue,
		400: alloc.ErrInvalidValue, 401: alloc.ErrInvalidValue,
		2: alloc.ErrOutOfMemory,
		3: driver.ErrBackendUnavailable, 4: driver.ErrBackendUnavailable, 34: driver.ErrBackendUnavailable,
		35: driver.ErrBackendUnavailable, 36: driver.ErrBackendUnavailable, 46: driver.ErrBackendUnavailable,
		100: driver.ErrBackendUnavailable, 102: driver.ErrBackendUnavailable, 103: driver.ErrBackendUnavailable,
		127: driver.ErrBackendUnavailable, 802: driver.ErrBackendUnavailable, 803: driver.ErrBackendUnavailable,
		804: driver.ErrBackendUnavailable,
		900: driver.ErrCaptureIllegalOp, 906: driver.ErrCaptureIllegalOp, 907: driver.ErrCaptureIllegalOp,
		901: alloc.ErrCaptureInvalidated, 902: alloc.ErrCaptureInvalidated, 903: alloc.ErrCaptureInvalidated,
		904: alloc.ErrCaptureInvalidated, 905: alloc.ErrCaptureInvalidated,
		910: alloc.ErrCaptureInvalidated,
		909: driver.ErrDriver, 801: driver.ErrDriver, 700: driver.ErrDriver, 719: driver.ErrDriver, 999: driver.ErrDriver,
	}
	all := []error{alloc.ErrInvalidValue, alloc.ErrOutOfMemory, driver.ErrBackendUnavailable, driver.ErrCaptureIllegalOp,
		alloc.ErrCaptureInvalidated, driver.ErrDriver, driver.ErrCaptureUnavailable}
	for code, sentinel := range want {
		err := error(&Error{Op: "op", Call: "cudaSomething", Code: code, Text: "the runtime's text"})
		require.ErrorIs(t, err, sentinel, "code %d", code)
		for _, other := range all {
			if other != sentinel {
				require.False(t, errors.Is(err, other), "code %d must not match %v", code, other)
			}
		}
		require.Contains(t, err.Error(), "cudaSomething returned ")
		require.Contains(t, err.Error(), "the runtime's text")
		var e *Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, code, e.Code)
	}
}

// 908 is a capture ended on the wrong thread: refused, not invalidated.
func TestErrorWrongThread(t *testing.T) {
	err := error(&Error{Op: "end capture", Call: "cudaStreamEndCapture", Code: 908, Text: "operation not permitted on a stream capture object in current thread"})
	require.ErrorIs(t, err, driver.ErrCaptureWrongThread)
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.NotErrorIs(t, err, driver.ErrDriver)
	require.Contains(t, err.Error(), "capture must be ended on the thread that began it")
	require.Contains(t, err.Error(), "cudaStreamEndCapture returned 908")
}

func TestErrorMessageAndOverride(t *testing.T) {
	err := &Error{Op: "malloc async 64 B", Call: "cudaMallocFromPoolAsync", Code: 2, Text: "out of memory"}
	require.Equal(t, "out of device memory: cuda: malloc async 64 B: cudaMallocFromPoolAsync returned 2 (out of memory)", err.Error())
	rt := &gpurt.Runtime{Vendor: &vendor}
	over := rt.Error("begin capture", "cudaStreamBeginCapture", 801, "operation not supported", driver.ErrCaptureUnavailable)
	require.ErrorIs(t, over, driver.ErrCaptureUnavailable)
	require.NotErrorIs(t, over, driver.ErrDriver)
	var e *Error
	require.ErrorAs(t, over, &e)
	require.Equal(t, 801, e.Code)
}
