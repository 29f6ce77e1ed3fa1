package gpurt

import (
	"errors"

	"github.com/capalloc/capalloc/internal/osthread"
)

// Why some calls run on a locked OS thread
//
// Goroutines migrate between OS threads, and two pieces of runtime state
// (CUDA's and HIP's alike) belong to the OS thread, not to anything Go can
// see:
//
//   - The current device (cudaSetDevice, hipSetDevice) is per thread.
//     Calls that act on "the current device" - stream and pool creation,
//     the synchronous malloc and free, pinned host allocation and its
//     free, memory info, graph instantiation - would land on whatever
//     device the borrowed thread last had (device 0, or another library's
//     choice).
//   - A Global or ThreadLocal capture must be ended on the thread that
//     began it (StreamCaptureWrongThread, 908), and a ThreadLocal or Global
//     capture forbids that thread's own unsafe calls.
//
// So the driver owns two locked threads, each with the device made current
// once: "dev" runs the device-dependent calls above, and "capture" runs
// only begin and end capture. Keeping them apart matters: if a synchronous
// malloc ran on the thread that began a ThreadLocal capture, the runtime
// would refuse it and invalidate that capture, although the rule
// (ThreadLocal forbids unsafe calls on the capturing thread only) says
// another stream's synchronous allocation is fine.
//
// Everything bound to a stream or a pool - pool alloc and free, async
// copies and memsets, graph launch, stream synchronize/query/is-capturing -
// runs on the caller's goroutine, whatever its thread: the runtime
// executes them in the stream's own context (CUDA's multi-device rules,
// which HIP follows: a memory copy or synchronization succeeds on a stream
// of a device that is not current; not verified on an AMD GPU). Only a
// kernel launch needs the stream's device (CUDA: the module's context)
// current: LaunchKernel, on the caller's goroutine too, locks its thread
// for the launch and makes it current there, putting the thread's own
// back after (kernel.go). That keeps the hot path free of thread
// hand-offs.

// Thread runs functions one at a time on one locked OS thread
// (internal/osthread); a call after Stop fails with the vendor's closed
// error.
type Thread struct {
	t *osthread.Thread
	v *Vendor
}

// StartThread locks a new goroutine to its thread and runs init there
// first; init's error stops the thread.
func (v *Vendor) StartThread(init func() error) (*Thread, error) {
	t, err := osthread.Start(init)
	if err != nil {
		return nil, err
	}
	return &Thread{t, v}, nil
}

// Do runs f on the thread and returns its error, or the closed error for
// op once the thread is stopped.
func (t *Thread) Do(op string, f func() error) error {
	err := t.t.Do(f)
	if errors.Is(err, osthread.ErrStopped) {
		return t.v.ErrClosed(op)
	}
	return err
}

// Stop ends the thread after the job in progress, if any.
func (t *Thread) Stop() { t.t.Stop() }
