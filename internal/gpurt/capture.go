package gpurt

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// CaptureMode maps alloc's capture modes to the runtime's stream capture
// mode.
func (v *Vendor) CaptureMode(m driver.CaptureMode) (uintptr, error) {
	switch m {
	case driver.Global:
		return CaptureModeGlobal, nil
	case driver.ThreadLocal:
		return CaptureModeThreadLocal, nil
	case driver.Relaxed:
		return CaptureModeRelaxed, nil
	}
	return 0, v.Errf(driver.ErrInvalidValue, "begin capture: capture mode %d", int(m))
}

// BeginCapture runs begin capture on the capture thread, where EndCapture
// will run too (see thread.go). The not-supported code (801) means this
// device or driver cannot capture: driver.ErrCaptureUnavailable. A capture
// gate (hip's no_capture) refuses first, with no call made.
func (d *Driver) BeginCapture(s driver.Stream, mode driver.CaptureMode) error {
	const op = "begin capture"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if d.captureGate != nil {
		if err := d.captureGate(op); err != nil {
			return err
		}
	}
	m, err := d.v.CaptureMode(mode)
	if err != nil {
		return err
	}
	return d.capture.Do(op, func() error {
		code := Call(d.rt.StreamBeginCapture.Addr, uintptr(s), m)
		if code == CodeNotSupported {
			return d.rt.FailAs(driver.ErrCaptureUnavailable, fmt.Sprintf("%s (%s)", op, mode), d.rt.StreamBeginCapture.Name, code)
		}
		return d.rt.Check(fmt.Sprintf("%s (%s)", op, mode), d.rt.StreamBeginCapture.Name, code)
	})
}

// EndCapture runs end capture on the thread that began it. An invalidated
// capture returns 901 and no graph: driver.ErrCaptureInvalidated.
func (d *Driver) EndCapture(s driver.Stream) (driver.GraphHandle, error) {
	const op = "end capture"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	var g uintptr
	err := d.capture.Do(op, func() error {
		return d.rt.Check(op, d.rt.StreamEndCapture.Name, Call(d.rt.StreamEndCapture.Addr, uintptr(s), uintptr(unsafe.Pointer(&g))))
	})
	if err != nil {
		return 0, err
	}
	if g == 0 {
		return 0, d.v.Errf(driver.ErrCaptureInvalidated, "%s: %s returned no graph", op, d.rt.StreamEndCapture.Name)
	}
	return driver.GraphHandle(g), nil
}

// GraphInstantiate uses instantiate-with-flags, whose signature is the
// same in every version either runtime accepts (plain instantiate's is
// not). It runs on the dev thread: the exec is built for the current
// device's context.
func (d *Driver) GraphInstantiate(g driver.GraphHandle, autoFree bool) (driver.GraphExec, error) {
	const op = "graph instantiate"
	if err := d.checkHandle(op, uintptr(g), "graph"); err != nil {
		return 0, err
	}
	flags := uintptr(0)
	if autoFree {
		flags = GraphInstantiateAutoFreeOnLaunch
	}
	var e uintptr
	err := d.dev.Do(op, func() error {
		// Relaxed (relaxed.go): instantiating must not invalidate another
		// stream's Global-mode capture.
		return d.rt.Check(op, d.rt.GraphInstantiateWithFlags.Name, d.relaxed(func() int32 {
			return Call(d.rt.GraphInstantiateWithFlags.Addr, uintptr(unsafe.Pointer(&e)), uintptr(g), flags)
		}))
	})
	return driver.GraphExec(e), err
}

// GraphLaunch enqueues the graph on s (stream-bound: any thread).
func (d *Driver) GraphLaunch(e driver.GraphExec, s driver.Stream) error {
	const op = "graph launch"
	if err := d.checkStreamHandle(op, s, uintptr(e), "graph exec"); err != nil {
		return err
	}
	return d.rt.Check(op, d.rt.GraphLaunch.Name, First(CallHot(d.rt.GraphLaunch.Addr, uintptr(e), uintptr(s))))
}

func (d *Driver) GraphExecDestroy(e driver.GraphExec) error {
	const op = "graph exec destroy"
	if err := d.checkHandle(op, uintptr(e), "graph exec"); err != nil {
		return err
	}
	// Relaxed (relaxed.go): CUDA counts it as unsafe (HIP follows CUDA's
	// capture rules), and closing one allocator's graph must not
	// invalidate another's Global capture.
	return d.rt.Check(op, d.rt.GraphExecDestroy.Name, d.relaxed(func() int32 { return Call(d.rt.GraphExecDestroy.Addr, uintptr(e)) }))
}

func (d *Driver) GraphDestroy(g driver.GraphHandle) error {
	const op = "graph destroy"
	if err := d.checkHandle(op, uintptr(g), "graph"); err != nil {
		return err
	}
	return d.rt.Check(op, d.rt.GraphDestroy.Name, Call(d.rt.GraphDestroy.Addr, uintptr(g)))
}
