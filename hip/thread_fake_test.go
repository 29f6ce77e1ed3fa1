package hip

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The OS threads HIP calls run on: the device thread (OnDevice) and the
// capture thread a capture must end on.

// OnDevice runs fn on a thread where the driver's device is current (the
// fake logs each call's current device): what RCCL's ncclCommInitRank
// needs. fn's error comes back; after Close it is refused.
func TestFakeOnDeviceRunsWithTheDeviceCurrent(t *testing.T) {
	t.Setenv("FAKE_HIP_DEVICES", "2")
	d, log := openFake(t, Options{Device: 1})
	h, err := purego.Dlopen(os.Getenv(LibEnv), purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	count, err := purego.Dlsym(h, "hipGetDeviceCount")
	require.NoError(t, err)
	log.Lines()
	var n int32
	require.NoError(t, d.OnDevice("test", func() error {
		purego.SyscallN(count, uintptr(unsafe.Pointer(&n)))
		return nil
	}))
	require.EqualValues(t, 2, n)
	require.Len(t, gpurttest.Find(log.Lines(), "dev=1 hipGetDeviceCount"), 1, "device 1 was current where fn ran")
	boom := errors.New("boom")
	require.ErrorIs(t, d.OnDevice("test", func() error { return boom }), boom)
	require.NoError(t, d.Close())
	require.ErrorIs(t, d.OnDevice("test", func() error { t.Error("ran after Close"); return nil }), alloc.ErrClosed)
}

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
