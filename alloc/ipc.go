package alloc

import (
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// ipcCalls is the allocator's IPC memory calls, installed in
// internal/allochooks and reached through internal/allocipc (whose Calls
// interface it implements; alloc's tests assert it), not as exported
// methods: engines share memory through symheap, not through handles of
// their own.
type ipcCalls struct{}

func init() { allochooks.IPC = ipcCalls{} }

// Export exports b, a live buffer from AllocSync, for another process.
func (ipcCalls) Export(a *Allocator, b Buffer) ([]byte, error) {
	var h []byte
	err := ipcGuarded(a, "IPCGetMemHandle", &b, func(d driver.IPCMemory) (func(), error) {
		var err error
		h, err = d.IPCGetMemHandle(b.Ptr())
		return nil, err
	})
	return h, err
}

// Open maps another process's allocation.
func (ipcCalls) Open(a *Allocator, handle []byte) (driver.DevicePtr, error) {
	var p driver.DevicePtr
	err := ipcGuarded(a, "IPCOpenMemHandle", nil, func(d driver.IPCMemory) (func(), error) {
		q, err := d.IPCOpenMemHandle(handle)
		if err != nil {
			return nil, err
		}
		p = q
		// Abandoned by the watchdog: nobody holds q, so unmap it.
		return func() { _ = d.IPCCloseMemHandle(q) }, nil
	})
	return p, err
}

// Close unmaps an address Open returned.
func (ipcCalls) Close(a *Allocator, p driver.DevicePtr) error {
	return ipcGuarded(a, "IPCCloseMemHandle", nil, func(d driver.IPCMemory) (func(), error) { return nil, d.IPCCloseMemHandle(p) })
}

// ipcGuarded runs fn through the guard's blocking path, refused where an
// unsafe call is (as AllocSync), so no capture begins while it runs. use,
// when not nil, is the buffer fn exports: validated, and pinned until fn
// returns, so a Free or Close racing the export does not free it under the
// driver call.
func ipcGuarded(a *Allocator, op string, use *Buffer, fn func(driver.IPCMemory) (func(), error)) error {
	d, ok := a.drv.(driver.IPCMemory)
	if !ok {
		return a.fail(op, 0, StateNone, wrapf(ErrInvalidValue, "backend %s has no IPC memory handles", a.backend))
	}
	return a.guard.blockingUndo(op, 0, use, func(st CaptureState) error {
		if use != nil {
			if err := a.validateLocked(*use, 0, 0); err != nil {
				return err
			}
			if s := use.blk.seg; s != nil && s.exp != nil {
				return wrapf(driver.ErrNotExportable, "buffer %#x is in an expandable segment (Options.ExpandableSegments): allocate what you export with AllocSync", use.ptr)
			}
		}
		why := a.guard.unsafeAllowedLocked(st, false)
		switch {
		case why == nil:
			return nil
		case st == StateInvalidated:
			return wrapf(ErrCaptureInvalidated, "IPC memory handle")
		}
		return wrapf(driver.ErrCaptureIllegalOp, "IPC memory handle: %v", why)
	}, func() (func(), error) { return fn(d) })
}
