package alloc

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// The guard: every refusal rule of the capture contract (docs/design.md's table)
// is here, and every driver call an Allocator makes goes through one of its
// two paths. Both check before calling the driver: a call that a capture
// forbids is never made.
//
//   - enqueue: stream-ordered work (async copies, memset, a host function).
//     Made at once with no capture, recorded into a capture this allocator
//     started, refused in any other state.
//   - blocking: unsafe calls (synchronous allocation and free, pinning,
//     pageable copies, synchronize, query). Made under the capture domain's
//     gate (so no capture begins meanwhile) and the watchdog; refused when
//     a capture forbids them: this allocator's own (unless Relaxed and off
//     its stream), one it did not start, or a Global-mode one anywhere in
//     the domain (CUDA's rule).
//
// Cleanup that must happen whatever the captures are doing is not refused
// but deferred: release.go's cleanup. Capture begin and end are in
// capture.go; the domain's record of captures and its gate in domain.go and
// gate.go.

// refusal is the error for a data operation in a state that forbids it.
func refusal(st CaptureState, what string) error {
	switch st {
	case StateExternal:
		return wrapf(ErrCaptureIncompatibleAllocation, "%s: a capture this allocator did not start is active on its stream", what)
	case StateInvalidated:
		return wrapf(ErrCaptureInvalidated, "%s", what)
	}
	return wrapf(ErrCaptureIncompatibleAllocation, "%s", what)
}

// unsafeAllowedLocked says whether an unsafe (implicitly synchronizing)
// call may be made now, from state st. Caller holds a.mu.
func (a *Allocator) unsafeAllowedLocked(st CaptureState, onStream bool) error {
	switch st {
	case StateActive:
		if onStream || a.cap.mode != Relaxed {
			return fmt.Errorf("own %s-mode capture is active", a.cap.mode)
		}
	case StateExternal:
		return errors.New("a capture this allocator did not start is active on its stream")
	case StateInvalidated:
		return ErrCaptureInvalidated
	}
	// Every allocator acts as a Global-mode thread (CUDA's default): Go
	// cannot tie a goroutine to the per-thread interaction mode.
	if a.dom.globalElsewhere(a.stream) {
		return errors.New("a global-mode capture is active on another stream")
	}
	return nil
}

// unsafeRefusalLocked turns unsafeAllowedLocked's verdict into the typed
// error for a data operation.
func (a *Allocator) unsafeRefusalLocked(st CaptureState, onStream bool, what string) error {
	why := a.unsafeAllowedLocked(st, onStream)
	switch {
	case why == nil:
		return nil
	case st == StateInvalidated:
		return wrapf(ErrCaptureInvalidated, "%s", what)
	}
	return wrapf(ErrCaptureIncompatibleAllocation, "%s: %v", what, why)
}

// syncRefusalLocked is the error for a synchronize or query that a capture
// forbids; the capture stays valid because no driver call is made.
func (a *Allocator) syncRefusalLocked(st CaptureState) error {
	why := a.unsafeAllowedLocked(st, true)
	switch {
	case why == nil:
		return nil
	case st == StateInvalidated:
		return fmt.Errorf("%w: %w", ErrSyncDuringCapture, ErrCaptureInvalidated)
	}
	return wrapf(ErrSyncDuringCapture, "%v", why)
}

// enqueue runs a stream-ordered driver call behind the guard: made eagerly
// with no capture, recorded into a capture this allocator started, refused
// (no driver call) in any other state. check validates operands under a.mu.
// dst and src (a zero Buffer when there is none) are the device buffers the
// call uses: a capture that records it keeps their memory from reuse until
// its graph is closed.
func (a *Allocator) enqueue(op string, size int64, dst, src Buffer, check func() error, call func() error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, err := a.stateLocked()
	if err == nil {
		err = check()
	}
	if err == nil {
		switch st {
		case StateNone:
			err = call()
		case StateActive:
			if err = call(); err == nil {
				err = afterCaptured(a.drv, a.stream, op)
			} else {
				err = refusedInCapture(a.drv, a.stream, err)
			}
			if err == nil {
				a.refLocked(a.cap, dst.blk)
				a.refLocked(a.cap, src.blk)
			}
		default:
			err = refusal(st, op)
		}
	}
	if err != nil {
		return a.fail(op, size, st, err)
	}
	return nil
}

// blocking runs an unsafe call on the stream behind the gate and the
// watchdog: refused, with no driver call, whenever a capture forbids it.
func (a *Allocator) blocking(op string, size int64, check func(st CaptureState) error, call func() error) error {
	return a.blockingUndo(op, size, nil, check, func() (func(), error) { return nil, call() })
}

// blockingOn is blocking for a call that uses buf's memory (a pageable
// copy): check validates buf, which stays pinned (pinLocked) from the check
// until the driver call returns, so a Free, Graph.Close or Close racing the
// call holds the memory back instead of freeing it under the driver.
func (a *Allocator) blockingOn(op string, size int64, buf Buffer, check func(st CaptureState) error, call func() error) error {
	return a.blockingUndo(op, size, &buf, check, func() (func(), error) { return nil, call() })
}

// blockingUndo is blocking for a call that acquires something: if the
// caller was already given ErrCaptureTimeout when call succeeds, nobody
// will ever own the result, so the undo call returns releases it. use,
// when not nil, is pinned as in blockingOn (check must validate it).
func (a *Allocator) blockingUndo(op string, size int64, use *Buffer, check func(st CaptureState) error, call func() (func(), error)) error {
	var (
		seen     atomic.Int32 // written by a call the watchdog may abandon
		undo     func()
		followUp bool // the unpin let a release through: make it
	)
	expired, err := a.watchdog.run(op, a.watchdog.timeout, func() (err error) {
		undo, followUp, err = a.guardedCall(use, &seen, check, call)
		return err
	}, func(err error) {
		if err == nil && undo != nil {
			undo()
		}
		if followUp {
			a.afterUnpin(a.cleanupLate)
		}
	})
	if !expired && followUp { // expired: followUp is the late path's
		a.afterUnpin(a.cleanup)
	}
	if err != nil {
		return a.fail(op, size, CaptureState(seen.Load()), err)
	}
	return nil
}

// guardedCall is one blocking call, on the watchdog's worker: check under
// a.mu, then call without it, all under the gate's read side so that no
// capture begins meanwhile; use's block is pinned from the check to the
// end of the call. followUp says whether the unpin let a release through
// (an AllocSync free queued, Close's teardown due): the caller makes it,
// out of the gate.
func (a *Allocator) guardedCall(use *Buffer, seen *atomic.Int32, check func(st CaptureState) error, call func() (func(), error)) (undo func(), followUp bool, err error) {
	a.dom.gate.RLock()
	defer a.dom.gate.RUnlock()
	a.mu.Lock()
	st, err := a.stateLocked()
	seen.Store(int32(st))
	if err == nil {
		err = check(st)
	}
	if err != nil {
		a.mu.Unlock()
		return nil, false, err
	}
	if use == nil {
		a.mu.Unlock()
		undo, err = call()
		return undo, false, err
	}
	blk := use.blk
	a.pinLocked(blk)
	if !blk.validFor(use.gen) { // a lane Free won the race since check (shard.go)
		a.unpinLocked(blk)
		followUp = len(a.pending) > 0 || a.closing
		a.mu.Unlock()
		return nil, followUp, wrapf(ErrInvalidBuffer, "buffer %#x was freed (double free or use after free)", use.ptr)
	}
	a.mu.Unlock()
	undo, err = call()
	a.mu.Lock()
	a.unpinLocked(blk)
	followUp = len(a.pending) > 0 || a.closing
	a.mu.Unlock()
	return undo, followUp, err
}
