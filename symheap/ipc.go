package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// ipc makes one of the driver's IPC memory calls (driver.IPCMemory: export
// this rank's heap, map or unmap a peer's) as a device-wide unsafe call:
// refused, with no driver call made, while a's stream captures (the
// heap's own capture or one behind its back: ErrCaptureIllegalOp), once
// a is closed (ErrClosed), and, through driver.DeviceWide, while a
// Global-mode capture is active anywhere in the capture domain; no capture
// begins while it runs. The heap is allocated with AllocSync, never in an
// expandable segment, so it can be exported.
func ipc(a *alloc.Allocator, op string, fn func(driver.IPCMemory) error) error {
	d := a.Driver()
	m, ok := d.(driver.IPCMemory)
	if !ok {
		return fmt.Errorf("%w: symheap: %s: backend %s has no IPC memory handles", alloc.ErrInvalidValue, op, d.Name())
	}
	st, err := a.CaptureStatus()
	if err != nil {
		return err
	}
	if st != alloc.StateNone {
		return fmt.Errorf("%w: symheap: %s during a capture (state %s)", driver.ErrCaptureIllegalOp, op, st)
	}
	return driver.DeviceWide(d.CaptureDomain(), "symheap: "+op, func() error { return fn(m) })
}
