package alloc

import "sync/atomic"

// The guard's two call paths (guard.go): enqueue for stream-ordered work,
// blocking for unsafe calls, each checking the capture state and the
// refusal rules under the allocator's lock before it calls the driver.

// enqueue runs a stream-ordered driver call behind the guard: made eagerly
// with no capture, recorded into a capture this allocator started, refused
// (no driver call) in any other state. check validates operands under the
// lock. dst and src (a zero Buffer when there is none) are the device
// buffers the call uses: a capture that records it keeps their memory from
// reuse until its graph is closed.
func (g *guard) enqueue(op string, size int64, dst, src Buffer, check func() error, call func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, err := g.stateLocked()
	if err == nil {
		err = check()
	}
	if err == nil {
		switch st {
		case StateNone:
			err = call()
		case StateActive:
			if err = call(); err == nil {
				err = afterCaptured(g.drv, g.stream, op)
			} else {
				err = refusedInCapture(g.drv, g.stream, err)
			}
			if err == nil {
				refLocked(g.cap, dst.blk)
				refLocked(g.cap, src.blk)
			}
		default:
			err = refusal(st, op)
		}
	}
	if err != nil {
		return g.fail(op, size, st, err)
	}
	return nil
}

// blocking runs an unsafe call on the stream behind the gate and the
// watchdog: refused, with no driver call, whenever a capture forbids it.
func (g *guard) blocking(op string, size int64, check func(st CaptureState) error, call func() error) error {
	return g.blockingUndo(op, size, nil, check, func() (func(), error) { return nil, call() })
}

// blockingOn is blocking for a call that uses buf's memory (a pageable
// copy): check validates buf, which stays pinned (pinLocked) from the check
// until the driver call returns, so a Free, Graph.Close or Close racing the
// call holds the memory back instead of freeing it under the driver.
func (g *guard) blockingOn(op string, size int64, buf Buffer, check func(st CaptureState) error, call func() error) error {
	return g.blockingUndo(op, size, &buf, check, func() (func(), error) { return nil, call() })
}

// blockingUndo is blocking for a call that acquires something: if the
// caller was already given ErrCaptureTimeout when call succeeds, nobody
// will ever own the result, so the undo call returns releases it. use,
// when not nil, is pinned as in blockingOn (check must validate it).
func (g *guard) blockingUndo(op string, size int64, use *Buffer, check func(st CaptureState) error, call func() (func(), error)) error {
	var (
		seen     atomic.Int32 // written by a call the watchdog may abandon
		undo     func()
		unpinned bool // use was pinned and is unpinned: the unpin may let a release through
	)
	expired, err := g.watchdog.run(op, g.watchdog.timeout, func() (err error) {
		undo, unpinned, err = g.guardedCall(use, &seen, check, call)
		return err
	}, func(err error) {
		if err == nil && undo != nil {
			undo()
		}
		if unpinned {
			g.mem.afterUnpin(g.rel.cleanupLate)
		}
	})
	if !expired && unpinned { // expired: the late path's
		g.mem.afterUnpin(g.rel.cleanup)
	}
	if err != nil {
		return g.fail(op, size, CaptureState(seen.Load()), err)
	}
	return nil
}

// guardedCall is one blocking call, on the watchdog's worker: check under
// the lock, then call without it, all under the gate's read side so that
// no capture begins meanwhile; use's block is pinned from the check to the
// end of the call. unpinned says whether it pinned and unpinned use: the
// unpin may have let a release through (an AllocSync free queued, Close's
// teardown due), which the caller makes (afterUnpin), out of the gate.
func (g *guard) guardedCall(use *Buffer, seen *atomic.Int32, check func(st CaptureState) error, call func() (func(), error)) (undo func(), unpinned bool, err error) {
	g.dom.gate.RLock()
	defer g.dom.gate.RUnlock()
	g.mu.Lock()
	st, err := g.stateLocked()
	seen.Store(int32(st))
	if err == nil {
		err = check(st)
	}
	if err != nil {
		g.mu.Unlock()
		return nil, false, err
	}
	if use == nil {
		g.mu.Unlock()
		undo, err = call()
		return undo, false, err
	}
	blk := use.blk
	g.rel.pinLocked(blk)
	if !blk.validFor(use.gen) { // a lane Free won the race since check (shard.go)
		g.mem.unpinLocked(blk)
		g.mu.Unlock()
		return nil, true, wrapf(ErrInvalidBuffer, "buffer %#x was freed (double free or use after free)", use.ptr)
	}
	g.mu.Unlock()
	undo, err = call()
	g.mu.Lock()
	g.mem.unpinLocked(blk)
	g.mu.Unlock()
	return undo, true, err
}
