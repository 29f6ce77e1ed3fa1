package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// CUDA's 900 does not always invalidate the capture. After a refusal alloc
// reads the stream's status again: here the driver refuses one allocation
// (injected 900, capture left alone), and alloc reports the operation
// refused, the capture still valid, and EndCapture succeeds.
func TestFake900LeavesCaptureActive(t *testing.T) {
	d, _ := openFake(t, Options{})
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.BeginCapture(alloc.Global))

	t.Setenv("FAKE_CUDA_FAIL", "cudaMallocFromPoolAsync:900")
	_, err = a.Alloc(4096)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.Contains(t, err.Error(), "cudaMallocFromPoolAsync returned 900")
	require.Contains(t, err.Error(), "the capture is still active")
	t.Setenv("FAKE_CUDA_FAIL", "")

	st, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateActive, st)
	buf, err := a.Alloc(4096)
	require.NoError(t, err, "the capture goes on")
	require.NoError(t, a.Free(buf))
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// When the refusal did invalidate the capture, the error says so too: it
// wraps ErrCaptureInvalidated as well, and EndCapture reports the loss.
func TestFake900ThatInvalidatesSaysSo(t *testing.T) {
	d, _ := openFake(t, Options{})
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	buf, err := a.Alloc(256)
	require.NoError(t, err)
	require.NoError(t, a.BeginCapture(alloc.Global))
	t.Setenv("FAKE_CUDA_FAIL", "cudaMemsetAsync:900")
	t.Setenv("FAKE_CUDA_FAIL_INVALIDATES", "1")
	err = a.Memset(buf, 0, 1, 256)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.Contains(t, err.Error(), "invalidated by the refusal")
	t.Setenv("FAKE_CUDA_FAIL", "")
	st, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateInvalidated, st)
	_, err = a.EndCapture()
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.NoError(t, a.Free(buf))
}

// 908 (a Global capture ended on another thread) is not an invalidation:
// the capture still records and ends on its own thread.
func TestFake908IsWrongThreadNotInvalidated(t *testing.T) {
	d, _ := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	require.NoError(t, d.BeginCapture(s, alloc.Global))
	t.Setenv("FAKE_CUDA_FAIL", "cudaStreamEndCapture:908")
	_, err = d.EndCapture(s)
	require.ErrorIs(t, err, alloc.ErrCaptureWrongThread)
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.Contains(t, err.Error(), "capture must be ended on the thread that began it")
	t.Setenv("FAKE_CUDA_FAIL", "")
	st, err := d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, alloc.DriverCaptureActive, st)
	g, err := d.EndCapture(s)
	require.NoError(t, err)
	require.NoError(t, d.GraphDestroy(g))
}
