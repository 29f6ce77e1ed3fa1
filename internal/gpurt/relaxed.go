package gpurt

import (
	"runtime"
	"sync"
	"unsafe"
)

// Calls made in Relaxed capture interaction mode
//
// CUDA counts cudaMallocFromPoolAsync and cudaFreeAsync on a stream that
// is not capturing, cudaGraphInstantiateWithFlags and cudaGraphExecDestroy
// as potentially unsafe: made from a thread in the default (Global)
// interaction mode while any Global-mode capture is under way in the
// process, they return 900 and invalidate that capture (cmd/cudatruth on
// an H100, CUDA 13.0: docs/cuda-truth.md). Two allocators in one engine hit
// exactly this: one captures its decode step while the other grows its
// pool. The same calls made from a thread in Relaxed interaction mode
// succeed and leave the capture intact (the table's other_relaxed rows),
// and neither touches the capturing stream: the memory is ordinary pool
// memory, the instantiation a host-side build. So the driver makes them
// with the calling thread switched to Relaxed for the duration of the call
// (the thread-exchange-stream-capture-mode call, then restored), as
// PyTorch's caching allocator does around its own allocations. Calls that
// synchronize (stream synchronize, the synchronous malloc and free, ...)
// are never relaxed: alloc's guard keeps them away from a forbidding
// capture. All of this is the documented capture safety: under strict
// safety (GB10, unrecorded devices: docs/capture-safety.md) the allocator
// never asks for these calls while any capture is active.
//
// HIP documents the same capture modes and the same
// hipThreadExchangeStreamCaptureMode (hip_runtime_api.h), so the hip
// driver makes the HIP equivalents the same way. Whether ROCm enforces the
// rule at all is NOT verified (no AMD GPU here; docs/hip-backend.md): if
// it does not, the switch costs two cheap calls and changes nothing.

// modeSlot is heap memory for the exchanged mode (CallHot takes no pointer
// to a Go stack variable).
type modeSlot struct{ mode int32 }

var modeSlots = sync.Pool{New: func() any { return new(modeSlot) }}

// relaxed runs fn, which makes one or more runtime calls, on the calling
// goroutine's OS thread in Relaxed interaction mode, and restores the
// thread's previous mode. A failure to switch is returned as fn's code
// without running fn.
func (d *Driver) relaxed(fn func() int32) int32 {
	x := d.rt.ThreadExchangeCaptureMode.Addr
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := modeSlots.Get().(*modeSlot)
	defer modeSlots.Put(m)
	m.mode = int32(CaptureModeRelaxed)
	if code, _ := CallHot(x, uintptr(unsafe.Pointer(&m.mode))); code != 0 {
		return code
	}
	code := fn()
	CallHot(x, uintptr(unsafe.Pointer(&m.mode))) // back to the previous mode
	return code
}
