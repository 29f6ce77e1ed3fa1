package cuda

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// cudaMode maps alloc's capture modes to cudaStreamCaptureMode.
func cudaMode(m alloc.CaptureMode) (uintptr, error) {
	switch m {
	case alloc.Global:
		return captureModeGlobal, nil
	case alloc.ThreadLocal:
		return captureModeThreadLocal, nil
	case alloc.Relaxed:
		return captureModeRelaxed, nil
	}
	return 0, errf(alloc.ErrInvalidValue, "begin capture: capture mode %d", int(m))
}

// BeginCapture runs cudaStreamBeginCapture on the capture thread, where
// EndCapture will run too (see thread.go). 801 (not supported) means this
// device or driver cannot capture: alloc.ErrCaptureUnavailable.
func (d *Driver) BeginCapture(s alloc.Stream, mode alloc.CaptureMode) error {
	const op = "begin capture"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	m, err := cudaMode(mode)
	if err != nil {
		return err
	}
	return d.capture.do(op, func() error {
		code := call(d.rt.streamBeginCapture, uintptr(s), m)
		if code == errNotSupported {
			e := d.rt.fail(fmt.Sprintf("%s (%s)", op, mode), "cudaStreamBeginCapture", code)
			e.kind = alloc.ErrCaptureUnavailable
			return e
		}
		return d.rt.check(fmt.Sprintf("%s (%s)", op, mode), "cudaStreamBeginCapture", code)
	})
}

// EndCapture runs cudaStreamEndCapture on the thread that began it. An
// invalidated capture returns 901 and no graph: alloc.ErrCaptureInvalidated.
func (d *Driver) EndCapture(s alloc.Stream) (alloc.GraphHandle, error) {
	const op = "end capture"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	var g uintptr
	err := d.capture.do(op, func() error {
		return d.rt.check(op, "cudaStreamEndCapture", call(d.rt.streamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g))))
	})
	if err != nil {
		return 0, err
	}
	if g == 0 {
		return 0, errf(alloc.ErrCaptureInvalidated, "%s: cudaStreamEndCapture returned no graph", op)
	}
	return alloc.GraphHandle(g), nil
}

// GraphInstantiate uses cudaGraphInstantiateWithFlags, whose signature is
// the same in CUDA 11.4 to 13 (cudaGraphInstantiate's is not). It runs on
// the dev thread: the exec is built for the current device's context.
func (d *Driver) GraphInstantiate(g alloc.GraphHandle, autoFree bool) (alloc.GraphExec, error) {
	const op = "graph instantiate"
	if d.closed.Load() {
		return 0, errClosed(op)
	}
	if g == 0 {
		return 0, errf(alloc.ErrInvalidValue, "%s: null graph", op)
	}
	flags := uintptr(0)
	if autoFree {
		flags = graphInstantiateAutoFreeOnLaunch
	}
	var e uintptr
	err := d.dev.do(op, func() error {
		// Relaxed (relaxed.go): instantiating must not invalidate another
		// stream's Global-mode capture.
		return d.rt.check(op, "cudaGraphInstantiateWithFlags", d.relaxed(func() int32 {
			return call(d.rt.graphInstantiateWithFlags, uintptr(unsafe.Pointer(&e)), uintptr(g), flags)
		}))
	})
	return alloc.GraphExec(e), err
}

// GraphLaunch enqueues the graph on s (stream-bound: any thread).
func (d *Driver) GraphLaunch(e alloc.GraphExec, s alloc.Stream) error {
	const op = "graph launch"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if e == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null graph exec", op)
	}
	return d.rt.check(op, "cudaGraphLaunch", first(callHot(d.rt.graphLaunch, uintptr(e), uintptr(s))))
}

func (d *Driver) GraphExecDestroy(e alloc.GraphExec) error {
	const op = "graph exec destroy"
	if d.closed.Load() {
		return errClosed(op)
	}
	if e == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null graph exec", op)
	}
	// Relaxed (relaxed.go): CUDA counts it as unsafe, and closing one
	// allocator's graph must not invalidate another's Global capture.
	return d.rt.check(op, "cudaGraphExecDestroy", d.relaxed(func() int32 { return call(d.rt.graphExecDestroy, uintptr(e)) }))
}

func (d *Driver) GraphDestroy(g alloc.GraphHandle) error {
	const op = "graph destroy"
	if d.closed.Load() {
		return errClosed(op)
	}
	if g == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null graph", op)
	}
	return d.rt.check(op, "cudaGraphDestroy", call(d.rt.graphDestroy, uintptr(g)))
}
