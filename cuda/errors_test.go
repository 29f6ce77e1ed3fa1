package cuda

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

func TestErrorMapping(t *testing.T) {
	want := map[int]error{
		1: alloc.ErrInvalidValue, 17: alloc.ErrInvalidValue, 21: alloc.ErrInvalidValue, 101: alloc.ErrInvalidValue,
		400: alloc.ErrInvalidValue, 401: alloc.ErrInvalidValue,
		2: alloc.ErrOutOfMemory,
		3: alloc.ErrBackendUnavailable, 4: alloc.ErrBackendUnavailable, 34: alloc.ErrBackendUnavailable,
		35: alloc.ErrBackendUnavailable, 36: alloc.ErrBackendUnavailable, 46: alloc.ErrBackendUnavailable,
		100: alloc.ErrBackendUnavailable, 102: alloc.ErrBackendUnavailable, 103: alloc.ErrBackendUnavailable,
		127: alloc.ErrBackendUnavailable, 802: alloc.ErrBackendUnavailable, 803: alloc.ErrBackendUnavailable,
		804: alloc.ErrBackendUnavailable,
		900: alloc.ErrCaptureIllegalOp, 906: alloc.ErrCaptureIllegalOp, 907: alloc.ErrCaptureIllegalOp,
		901: alloc.ErrCaptureInvalidated, 902: alloc.ErrCaptureInvalidated, 903: alloc.ErrCaptureInvalidated,
		904: alloc.ErrCaptureInvalidated, 905: alloc.ErrCaptureInvalidated,
		910: alloc.ErrCaptureInvalidated,
		909: alloc.ErrDriver, 801: alloc.ErrDriver, 700: alloc.ErrDriver, 719: alloc.ErrDriver, 999: alloc.ErrDriver,
	}
	all := []error{alloc.ErrInvalidValue, alloc.ErrOutOfMemory, alloc.ErrBackendUnavailable, alloc.ErrCaptureIllegalOp,
		alloc.ErrCaptureInvalidated, alloc.ErrDriver, alloc.ErrCaptureUnavailable}
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
		require.Equal(t, code, codeOf(err))
	}
}

// 908 is a capture ended on the wrong thread: refused, not invalidated.
func TestErrorWrongThread(t *testing.T) {
	err := error(&Error{Op: "end capture", Call: "cudaStreamEndCapture", Code: 908, Text: "operation not permitted on a stream capture object in current thread"})
	require.ErrorIs(t, err, alloc.ErrCaptureWrongThread)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.NotErrorIs(t, err, alloc.ErrDriver)
	require.Contains(t, err.Error(), "capture must be ended on the thread that began it")
	require.Contains(t, err.Error(), "cudaStreamEndCapture returned 908")
}

func TestErrorMessageAndOverride(t *testing.T) {
	err := &Error{Op: "malloc async 64 B", Call: "cudaMallocFromPoolAsync", Code: 2, Text: "out of memory"}
	require.Equal(t, "out of device memory: cuda: malloc async 64 B: cudaMallocFromPoolAsync returned 2 (out of memory)", err.Error())
	over := &Error{Op: "begin capture", Call: "cudaStreamBeginCapture", Code: 801, Text: "operation not supported", kind: alloc.ErrCaptureUnavailable}
	require.ErrorIs(t, over, alloc.ErrCaptureUnavailable)
	require.NotErrorIs(t, over, alloc.ErrDriver)
	require.Zero(t, codeOf(errors.New("plain")))
}
