package hip

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// capturingAllocator opens a driver over the fake at path and starts a Global-mode
// capture on an allocator of it; the log is cleared after.
func capturingAllocator(t *testing.T, path string) (*alloc.Allocator, *fakeLog) {
	t.Helper()
	log := openFakeLog(t, path)
	d, err := New(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	require.NoError(t, a.BeginCapture(alloc.Global))
	log.lines()
	return a, log
}

// Opening a device during another allocator's Global capture is refused
// before any driver call, with a typed error; the capture stays valid and
// the open succeeds after it.
func TestFakeOpenDuringGlobalCaptureIsRefused(t *testing.T) {
	a, log := capturingAllocator(t, fakeLib(t))

	_, err := New(Options{})
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp)
	require.Contains(t, err.Error(), "open device")
	require.Contains(t, err.Error(), "global-mode capture")
	_, err = backends.OpenString(t.Context(), "hip;cpu")
	require.ErrorIs(t, err, alloc.ErrCaptureIllegalOp, "the chain stops: falling back to cpu because of a capture would surprise")
	require.Empty(t, log.lines(), "no driver call while the capture is active")

	g, err := a.EndCapture()
	require.NoError(t, err, "the capture survived")
	require.NoError(t, g.Close())
	d, err := New(Options{})
	require.NoError(t, err, "a retry after the capture opens")
	require.NoError(t, d.Close())
}

// Closing a driver during another allocator's Global capture marks it
// closed at once and defers the vendor teardown until the capture ends.
func TestFakeCloseDuringGlobalCaptureIsDeferred(t *testing.T) {
	path := fakeLib(t)
	other, err := New(Options{}) // opened before the capture
	require.NoError(t, err)
	_, err = other.CreateStream()
	require.NoError(t, err)
	_, err = other.HostAlloc(4096)
	require.NoError(t, err)

	a, log := capturingAllocator(t, path) // the same library: one log
	require.NoError(t, other.Close(), "close is not refused")
	require.ErrorIs(t, other.Close(), alloc.ErrClosed)
	_, err = other.Malloc(64)
	require.ErrorIs(t, err, alloc.ErrClosed, "closed at once")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, other.WaitClosed(ctx), context.DeadlineExceeded, "teardown waits for the capture")
	require.Empty(t, log.lines(), "no driver call while the capture is active")

	g, err := a.EndCapture()
	require.NoError(t, err, "the capture survived")
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, other.WaitClosed(ctx))
	lines := log.lines()
	for _, fn := range []string{"hipHostFree", "hipStreamDestroy", "hipMemPoolDestroy"} {
		require.Len(t, find(lines, fn), 1, "%s after the capture: %v", fn, lines)
	}
	require.NoError(t, g.Close())
}

// Without a Global capture, Close tears down at once and reports the
// teardown's result; ThreadLocal and Relaxed captures do not defer it.
func TestFakeCloseOutsideGlobalCaptureIsImmediate(t *testing.T) {
	path := fakeLib(t)
	log := openFakeLog(t, path)
	d, err := New(Options{})
	require.NoError(t, err)
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.BeginCapture(alloc.ThreadLocal))
	other, err := New(Options{})
	require.NoError(t, err, "a ThreadLocal capture does not forbid opening on the driver's own thread")
	log.lines()
	require.NoError(t, other.Close())
	require.Len(t, find(log.lines(), "hipMemPoolDestroy"), 1, "torn down before Close returned")
	require.NoError(t, other.WaitClosed(t.Context()))
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, d.Close())
}
