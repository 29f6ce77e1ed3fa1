package alloc

import "sync/atomic"

// IPCMemory is implemented by drivers whose device allocations can be
// opened by another process (cudaIpc*, hipIpc*). The symmetric heap
// exchanges these handles once, at creation, before any capture.
//
// All three calls are device-wide and potentially synchronizing: a driver
// makes them as they come, so callers must keep them out of captures.
// Allocator's IPC methods do (ipc.go's guard); code holding the Driver
// directly must do the same. The handle names an allocation from Malloc
// (the runtimes export only synchronous allocations, cudaMalloc/hipMalloc:
// Allocator.AllocSync), at its base address.
type IPCMemory interface {
	IPCGetMemHandle(p DevicePtr) ([]byte, error) // opaque, fixed-size handle of the allocation holding p
	IPCOpenMemHandle(handle []byte) (DevicePtr, error)
	IPCCloseMemHandle(p DevicePtr) error
}

// IPCGetMemHandle exports b, a live buffer from AllocSync, for another
// process. It fails with ErrCaptureIllegalOp, no driver call made, where an
// unsafe call is refused: during this allocator's own Global or
// ThreadLocal capture (a Relaxed one allows it, as for AllocSync), any
// capture it did not start, or a Global-mode capture elsewhere in the
// domain (ErrCaptureInvalidated when its own capture is invalidated); with
// ErrInvalidValue when the driver has no IPC.
func (a *Allocator) IPCGetMemHandle(b Buffer) ([]byte, error) {
	var h []byte
	err := a.ipcGuarded("IPCGetMemHandle", func(d IPCMemory) (func(), error) {
		a.mu.Lock()
		err := a.validateLocked(b, 0, 0)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		h, err = d.IPCGetMemHandle(b.Ptr())
		return nil, err
	})
	return h, err
}

// IPCOpenMemHandle maps another process's allocation; close it with
// IPCCloseMemHandle. The address is not this allocator's buffer: it is
// not counted, pooled or freed by it. Guarded like IPCGetMemHandle.
func (a *Allocator) IPCOpenMemHandle(handle []byte) (DevicePtr, error) {
	var p DevicePtr
	err := a.ipcGuarded("IPCOpenMemHandle", func(d IPCMemory) (func(), error) {
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

// IPCCloseMemHandle unmaps an address IPCOpenMemHandle returned. Guarded
// like IPCGetMemHandle.
func (a *Allocator) IPCCloseMemHandle(p DevicePtr) error {
	return a.ipcGuarded("IPCCloseMemHandle", func(d IPCMemory) (func(), error) { return nil, d.IPCCloseMemHandle(p) })
}

// ipcGuarded runs fn under the watchdog and the domain's gate, after the
// unsafe-call check, as AllocSync does, so no capture begins while it runs.
func (a *Allocator) ipcGuarded(op string, fn func(IPCMemory) (func(), error)) error {
	d, ok := a.drv.(IPCMemory)
	if !ok {
		return a.fail(op, 0, StateNone, wrapf(ErrInvalidValue, "backend %s has no IPC memory handles", a.backend))
	}
	var seen atomic.Int32 // written by a call the watchdog may abandon
	err := a.watchdog.callUndo(op, func() (func(), error) {
		a.dom.gate.RLock()
		defer a.dom.gate.RUnlock()
		a.mu.Lock()
		st, err := a.stateLocked()
		seen.Store(int32(st))
		if err == nil {
			if why := a.unsafeAllowedLocked(st, false); why != nil {
				if st == StateInvalidated {
					err = wrapf(ErrCaptureInvalidated, "IPC memory handle")
				} else {
					err = wrapf(ErrCaptureIllegalOp, "IPC memory handle: %v", why)
				}
			}
		}
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return fn(d)
	})
	if err != nil {
		return a.fail(op, 0, CaptureState(seen.Load()), err)
	}
	return nil
}
