package hip

import (
	"errors"

	"github.com/capalloc/capalloc/internal/osthread"
)

// Why some calls run on a locked OS thread
//
// Goroutines migrate between OS threads, and two pieces of HIP state belong
// to the OS thread, not to anything Go can see:
//
//   - The current device (hipSetDevice) is per thread. Calls that act on
//     "the current device" - hipStreamCreateWithPriority, hipMemPoolCreate,
//     hipMalloc, hipFree, hipHostMalloc, hipHostFree, hipMemGetInfo,
//     graph instantiation - would land on whatever device the borrowed
//     thread last had (device 0, or another library's choice).
//   - A Global or ThreadLocal capture must be ended on the thread that began
//     it (hipErrorStreamCaptureWrongThread, 908), and a ThreadLocal or
//     Global capture forbids that thread's own unsafe calls.
//
// So the driver owns two locked threads, each with the device made current
// once: "dev" runs the device-dependent calls above, and "capture" runs only
// hipStreamBeginCapture and hipStreamEndCapture. Keeping them apart
// matters: if hipMalloc ran on the thread that began a ThreadLocal capture,
// HIP would refuse it and invalidate that capture, although the rule
// (ThreadLocal forbids unsafe calls on the capturing thread only) says
// another stream's synchronous allocation is fine.
//
// Everything bound to a stream or a pool - hipMallocFromPoolAsync,
// hipFreeAsync, hipMemcpyAsync, hipMemsetAsync, hipGraphLaunch,
// hipStreamSynchronize/Query/IsCapturing - runs on the caller's goroutine,
// whatever its thread: as in CUDA, whose multi-device rules HIP follows, a
// memory copy or synchronization succeeds on a stream of a device that is
// not current; only kernel launches need the stream's device current, and
// this package launches none (not verified on an AMD GPU). That keeps the
// hot path free of thread hand-offs.

// osThread runs functions one at a time on one locked OS thread
// (internal/osthread); a call after stop fails with errClosed.
type osThread struct{ t *osthread.Thread }

// startThread locks a new goroutine to its thread and runs init there
// first; init's error stops the thread.
func startThread(init func() error) (*osThread, error) {
	t, err := osthread.Start(init)
	if err != nil {
		return nil, err
	}
	return &osThread{t}, nil
}

// do runs f on the thread and returns its error, or errClosed(op) once the
// thread is stopped.
func (t *osThread) do(op string, f func() error) error {
	err := t.t.Do(f)
	if errors.Is(err, osthread.ErrStopped) {
		return errClosed(op)
	}
	return err
}

// stop ends the thread after the job in progress, if any.
func (t *osThread) stop() { t.t.Stop() }
