package hip

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// HIP's rule for ending a capture is CUDA's: a capture not begun in
// Relaxed mode must end on the thread that began it, else
// hipErrorStreamCaptureWrongThread (908, hip_runtime_api.h) and the
// capture stays active. Here hipStreamEndCapture is called from another
// OS thread than the driver's capture thread, for real (no injected
// code): 908, typed as wrong thread and illegal, not invalidated; the
// driver's own EndCapture then succeeds. A Relaxed capture may end
// anywhere.
func TestFake908EndOnAnotherThread(t *testing.T) {
	d, _ := openFake(t, Options{})
	s, err := d.CreateStream()
	require.NoError(t, err)
	for _, mode := range driver.Modes() {
		require.NoError(t, d.BeginCapture(s, mode))
		code := endElsewhere(t, d, s)
		if mode == alloc.Relaxed {
			require.Zero(t, code, "a relaxed capture may end on any thread")
			continue
		}
		require.Equal(t, int32(gpurt.CodeStreamCaptureWrongThread), code, mode)
		err := d.rt.Check("end capture", "hipStreamEndCapture", code)
		require.ErrorIs(t, err, driver.ErrCaptureWrongThread)
		require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
		require.NotErrorIs(t, err, alloc.ErrCaptureInvalidated)
		require.Contains(t, err.Error(), "(hipErrorStreamCaptureWrongThread, 908)")
		gpurttest.EndActiveCapture(t, d, s, "908 leaves the capture active")
	}
}

// endElsewhere calls hipStreamEndCapture on a fresh locked OS thread and
// destroys the graph if it got one.
func endElsewhere(t *testing.T, d *Driver, s driver.Stream) int32 {
	t.Helper()
	done := make(chan int32)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var g uintptr
		code := gpurt.Call(d.rt.StreamEndCapture.Addr, uintptr(s), uintptr(unsafe.Pointer(&g)))
		if code == 0 && g != 0 {
			gpurt.Call(d.rt.GraphDestroy.Addr, g)
		}
		done <- code
	}()
	return <-done
}
