package hip

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// hipMode maps alloc's capture modes to hipStreamCaptureMode.
func hipMode(m alloc.CaptureMode) (uintptr, error) {
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

// BeginCapture runs hipStreamBeginCapture on the capture thread, where
// EndCapture will run too (see thread.go). 801 (not supported) means this
// device or driver cannot capture: alloc.ErrCaptureUnavailable. A driver
// opened with Options.NoCapture (the only way to use a runtime older than
// 5.6) refuses with the same error and makes no call: such a runtime would
// allocate at once inside the capture, and the graph would not own the
// memory.
func (d *Driver) BeginCapture(s alloc.Stream, mode alloc.CaptureMode) error {
	const op = "begin capture"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if d.opts.NoCapture {
		return errf(alloc.ErrCaptureUnavailable, "%s: opened with no_capture (HIP runtime %s; capture with pools needs %s)",
			op, versionString(d.rt.runtimeVersion), versionString(minCaptureVersion))
	}
	m, err := hipMode(mode)
	if err != nil {
		return err
	}
	return d.capture.do(op, func() error {
		code := call(d.rt.streamBeginCapture, uintptr(s), m)
		if code == errNotSupported {
			e := d.rt.fail(fmt.Sprintf("%s (%s)", op, mode), "hipStreamBeginCapture", code)
			e.kind = alloc.ErrCaptureUnavailable
			return e
		}
		return d.rt.check(fmt.Sprintf("%s (%s)", op, mode), "hipStreamBeginCapture", code)
	})
}

// EndCapture runs hipStreamEndCapture on the thread that began it. An
// invalidated capture returns 901 and no graph: alloc.ErrCaptureInvalidated.
func (d *Driver) EndCapture(s alloc.Stream) (alloc.GraphHandle, error) {
	const op = "end capture"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	var g uintptr
	err := d.capture.do(op, func() error {
		return d.rt.check(op, "hipStreamEndCapture", call(d.rt.streamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g))))
	})
	if err != nil {
		return 0, err
	}
	if g == 0 {
		return 0, errf(alloc.ErrCaptureInvalidated, "%s: hipStreamEndCapture returned no graph", op)
	}
	return alloc.GraphHandle(g), nil
}

// GraphInstantiate uses hipGraphInstantiateWithFlags, whose signature is
// declared the same in every HIP header that has it (hipGraphInstantiate's
// takes an error node and a log buffer). It runs on
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
		return d.rt.check(op, "hipGraphInstantiateWithFlags", d.relaxed(func() int32 {
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
	return d.rt.check(op, "hipGraphLaunch", first(callHot(d.rt.graphLaunch, uintptr(e), uintptr(s))))
}

func (d *Driver) GraphExecDestroy(e alloc.GraphExec) error {
	const op = "graph exec destroy"
	if d.closed.Load() {
		return errClosed(op)
	}
	if e == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null graph exec", op)
	}
	// Relaxed (relaxed.go): CUDA counts it as unsafe (HIP follows CUDA's
	// capture rules), and closing one
	// allocator's graph must not invalidate another's Global capture.
	return d.rt.check(op, "hipGraphExecDestroy", d.relaxed(func() int32 { return call(d.rt.graphExecDestroy, uintptr(e)) }))
}

func (d *Driver) GraphDestroy(g alloc.GraphHandle) error {
	const op = "graph destroy"
	if d.closed.Load() {
		return errClosed(op)
	}
	if g == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null graph", op)
	}
	return d.rt.check(op, "hipGraphDestroy", call(d.rt.graphDestroy, uintptr(g)))
}
