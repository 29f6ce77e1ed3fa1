package alloc

// IPCGetMemHandle exports b, a live buffer from AllocSync, for another
// process. It fails with ErrCaptureIllegalOp, no driver call made, where an
// unsafe call is refused: during this allocator's own Global or
// ThreadLocal capture (a Relaxed one allows it, as for AllocSync), any
// capture it did not start, or a Global-mode capture elsewhere in the
// domain (ErrCaptureInvalidated when its own capture is invalidated); with
// ErrInvalidValue when the driver has no IPC; with ErrNotExportable, no
// driver call made, for a buffer in an expandable segment.
func (a *Allocator) IPCGetMemHandle(b Buffer) ([]byte, error) {
	var h []byte
	err := a.ipcGuarded("IPCGetMemHandle", &b, func(d IPCMemory) (func(), error) {
		var err error
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
	err := a.ipcGuarded("IPCOpenMemHandle", nil, func(d IPCMemory) (func(), error) {
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
	return a.ipcGuarded("IPCCloseMemHandle", nil, func(d IPCMemory) (func(), error) { return nil, d.IPCCloseMemHandle(p) })
}

// ipcGuarded runs fn through the guard's blocking path, refused where an
// unsafe call is (as AllocSync), so no capture begins while it runs. use,
// when not nil, is the buffer fn exports: validated, and pinned until fn
// returns, so a Free or Close racing the export does not free it under the
// driver call.
func (a *Allocator) ipcGuarded(op string, use *Buffer, fn func(IPCMemory) (func(), error)) error {
	d, ok := a.drv.(IPCMemory)
	if !ok {
		return a.fail(op, 0, StateNone, wrapf(ErrInvalidValue, "backend %s has no IPC memory handles", a.backend))
	}
	return a.guard.blockingUndo(op, 0, use, func(st CaptureState) error {
		if use != nil {
			if err := a.validateLocked(*use, 0, 0); err != nil {
				return err
			}
			if s := use.blk.seg; s != nil && s.exp != nil {
				return wrapf(ErrNotExportable, "buffer %#x is in an expandable segment (Options.ExpandableSegments): allocate what you export with AllocSync", use.ptr)
			}
		}
		why := a.guard.unsafeAllowedLocked(st, false)
		switch {
		case why == nil:
			return nil
		case st == StateInvalidated:
			return wrapf(ErrCaptureInvalidated, "IPC memory handle")
		}
		return wrapf(ErrCaptureIllegalOp, "IPC memory handle: %v", why)
	}, func() (func(), error) { return fn(d) })
}
