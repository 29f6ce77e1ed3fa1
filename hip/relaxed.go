package hip

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
// process, they return 900 and invalidate that capture (measured on an
// H100: docs/cuda-truth.md). HIP documents the same capture modes and the
// same hipThreadExchangeStreamCaptureMode (hip_runtime_api.h), so this
// driver makes the HIP equivalents (hipMallocFromPoolAsync, hipFreeAsync,
// hipGraphInstantiateWithFlags, hipGraphExecDestroy) the way the cuda
// driver does: with the calling thread switched to Relaxed for the
// duration of the call, then restored. Whether ROCm enforces the rule at
// all is NOT verified (no AMD GPU here; docs/hip-backend.md): if it does
// not, the switch costs two cheap calls and changes nothing. Calls that
// synchronize (hipStreamSynchronize, hipMalloc, hipFree, ...) are never
// relaxed: alloc's guard keeps them away from a forbidding capture.

// modeSlot is heap memory for the exchanged mode (callHot takes no pointer
// to a Go stack variable).
type modeSlot struct{ mode int32 }

var modeSlots = sync.Pool{New: func() any { return new(modeSlot) }}

// relaxed runs fn, which makes one or more runtime calls, on the calling
// goroutine's OS thread in Relaxed interaction mode, and restores the
// thread's previous mode. A failure to switch is returned as fn's code
// without running fn.
func (d *Driver) relaxed(fn func() int32) int32 {
	x := d.rt.threadExchangeCaptureMode
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	m := modeSlots.Get().(*modeSlot)
	defer modeSlots.Put(m)
	m.mode = captureModeRelaxed
	if code, _ := callHot(x, uintptr(unsafe.Pointer(&m.mode))); code != 0 {
		return code
	}
	code := fn()
	callHot(x, uintptr(unsafe.Pointer(&m.mode))) // back to the previous mode
	return code
}
