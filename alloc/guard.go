package alloc

import (
	"errors"
	"fmt"
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The guard: every refusal rule of the capture contract (docs/design.md's
// table) is here, and every driver call an Allocator makes is checked by
// it first: a call that a capture forbids is never made. Most go through
// one of its two paths (guard_paths.go), which check and call. The rest
// are made under the allocator's lock by code whose caller has just read
// the capture state with the guard under that lock, and would otherwise
// take the lock a second time: the pool's upstream (pool_upstream.go:
// MallocAsync and FreeAsync on the allocator's stream, from Alloc,
// AllocSync and Trim with no capture of this allocator active, and from
// Close's teardown once its capture has ended), a capture's allocation
// node (capture.go: recorded into this allocator's capture, its status
// read again after), and capture begin and end themselves.
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
// capture.go and capture_end.go; the domain's record of captures and its
// gate in domain.go and gate.go.

// guard is an allocator's capture state and the rules over it: the capture
// it began, the domain's gate and record of captures, the watchdog, strict
// capture safety, and every refusal. closed, cap, lastCap and transition
// are guarded by the allocator's lock, which the guard shares (mu); the
// other fields are set once, by New. The memory its calls use is the
// allocator's, reached through mem.
type guard struct {
	mu       *sync.Mutex // the allocator's lock
	mem      guardedMemory
	rel      *releases // the allocator's block lifetimes: pins and cleanups (release.go)
	drv      driver.Driver
	backend  string
	stream   driver.Stream
	dom      *domain
	watchdog *watchdog
	strict   bool                              // the device's capture safety is SafetyStrict (strictLocked)
	profile  string                            // DeviceInfo.SafetyProfile, for strict refusals
	idler    driver.StreamIdler                // nil unless the driver is one
	poll     func(driver.Stream) (bool, error) // pollerOf(drv): nil when the driver cannot be polled

	closed     bool          // the allocator was closed: every call is refused
	cap        *capture      // capture begun by this allocator, nil when none
	lastCap    *capture      // most recently ended capture, for CaptureAllocCount
	transition chan struct{} // closed when a capture begin or end in flight returns
}

// guardedMemory is the allocator's side of the guard's call paths: the
// end of a blocking call's pin on a buffer's memory, and what that end may
// let through (release.go).
type guardedMemory interface {
	unpinLocked(b *block)
	afterUnpin(clean cleaner)
}

// newGuard is the guard of an allocator on drv's stream s, whose lock is
// mu and whose memory is mem.
func newGuard(mu *sync.Mutex, mem guardedMemory, rel *releases, drv driver.Driver, s driver.Stream, info driver.DeviceInfo, opts Options) guard {
	g := guard{
		mu:       mu,
		mem:      mem,
		rel:      rel,
		drv:      drv,
		backend:  drv.Name(),
		stream:   s,
		dom:      domainFor(drv.CaptureDomain()),
		watchdog: &watchdog{timeout: opts.watchdog()},
		strict:   info.CaptureSafety == driver.SafetyStrict,
		profile:  info.SafetyProfile(),
		poll:     pollerOf(drv),
	}
	if ab, ok := drv.(driver.Aborter); ok {
		g.watchdog.abort = ab.Abort
	}
	g.idler, _ = drv.(driver.StreamIdler)
	return g
}

// fail wraps err with the operation's context.
func (g *guard) fail(op string, size int64, st CaptureState, err error) error {
	return &Error{Op: op, Backend: g.backend, Size: size, State: st, Err: err}
}

// awaitTransitionLocked waits, the lock released meanwhile, while the
// driver is beginning or ending a capture of this allocator. Caller holds
// the lock.
func (g *guard) awaitTransitionLocked() {
	for g.transition != nil {
		ch := g.transition
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
}

// stateLocked asks the driver for the stream's capture status and folds it
// with the allocator's own flag. It fails on a closed allocator and on a
// capture the watchdog abandoned. Caller holds the lock.
func (g *guard) stateLocked() (CaptureState, error) {
	g.awaitTransitionLocked()
	if g.closed {
		return StateNone, ErrClosed
	}
	st, err := g.drv.StreamCaptureStatus(g.stream)
	if err != nil {
		return StateNone, err
	}
	s := classify(g.cap != nil, st)
	if g.cap != nil && g.cap.abandoned {
		return StateInvalidated, wrapf(ErrCaptureTimeout, "capture abandoned by the watchdog; its function or driver call is still running")
	}
	return s, nil
}

// allocStateLocked is stateLocked for an allocation from the pool, with
// strict safety's verdict on growing the pool read in the same look:
// mayGrow is false when strictRelaxedLocked would refuse pool growth now.
// The grower asks strictRelaxedLocked itself only then. Caller holds the
// lock.
func (g *guard) allocStateLocked() (st CaptureState, mayGrow bool, err error) {
	st, err = g.stateLocked()
	return st, !g.strictRelaxedForbids(), err
}

// classify folds the allocator's own flag and the driver's status into one
// state. began says whether this allocator started the current capture.
func classify(began bool, st driver.CaptureStatus) CaptureState {
	switch {
	case st == driver.CaptureInvalidated:
		return StateInvalidated
	case st == driver.CaptureActive && began:
		return StateActive
	case st == driver.CaptureActive:
		return StateExternal
	case began: // our capture vanished: someone ended it behind our back
		return StateInvalidated
	}
	return StateNone
}

// transitionLocked marks a capture begin or end in flight: operations on
// the allocator wait in stateLocked until the returned func, called with
// the lock held, ends it. Caller holds the lock.
func (g *guard) transitionLocked() (done func()) {
	ch := make(chan struct{})
	g.transition = ch
	return func() {
		if g.transition == ch {
			g.transition = nil
		}
		close(ch)
	}
}

// setCapLocked records the capture this allocator began (nil: none). The
// lane (shard.go) is closed while there is one: in a capture every
// allocation and free is the locked path's. Caller holds the lock.
func (g *guard) setCapLocked(c *capture, l *lane) {
	switch {
	case g.cap == nil && c != nil:
		l.closeLocked()
	case g.cap != nil && c == nil:
		l.openLocked()
	}
	g.cap = c
}

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
// call may be made now, from state st. Caller holds the lock.
func (g *guard) unsafeAllowedLocked(st CaptureState, onStream bool) error {
	switch st {
	case StateActive:
		if onStream || g.cap.mode != Relaxed {
			return fmt.Errorf("own %s-mode capture is active", g.cap.mode)
		}
	case StateExternal:
		return errors.New("a capture this allocator did not start is active on its stream")
	case StateInvalidated:
		return ErrCaptureInvalidated
	}
	// Every allocator acts as a Global-mode thread (CUDA's default): Go
	// cannot tie a goroutine to the per-thread interaction mode.
	if g.dom.globalElsewhere(g.stream) {
		return errors.New("a global-mode capture is active on another stream")
	}
	return nil
}

// unsafeRefusalLocked turns unsafeAllowedLocked's verdict into the typed
// error for a data operation.
func (g *guard) unsafeRefusalLocked(st CaptureState, onStream bool, what string) error {
	why := g.unsafeAllowedLocked(st, onStream)
	switch {
	case why == nil:
		return nil
	case st == StateInvalidated:
		return wrapf(ErrCaptureInvalidated, "%s", what)
	}
	return unsafeRefused("%s: %v", what, why)
}

// unsafeRefused is the error of an unsafe call (an implicitly
// synchronizing one: a synchronous allocation or free, pinned host
// memory, a pageable copy, freeing cached memory) that a capture forbids,
// refused before the driver by the documented rules or by strict safety
// (strictRefusal) alike: it matches ErrCaptureIncompatibleAllocation and
// driver.ErrCaptureIllegalOp, CUDA's answer to such a call during a
// capture, so an engine matching either sees every refusal.
func unsafeRefused(format string, args ...any) error {
	return fmt.Errorf("%w: %w: "+format, append([]any{driver.ErrCaptureIllegalOp, ErrCaptureIncompatibleAllocation}, args...)...)
}

// syncRefusalLocked is the error for a synchronize or query that a capture
// forbids; the capture stays valid because no driver call is made.
func (g *guard) syncRefusalLocked(st CaptureState) error {
	why := g.unsafeAllowedLocked(st, true)
	switch {
	case why == nil:
		return nil
	case st == StateInvalidated:
		return fmt.Errorf("%w: %w", ErrSyncDuringCapture, ErrCaptureInvalidated)
	}
	return wrapf(ErrSyncDuringCapture, "%v", why)
}

// The device's capture safety is classified by the driver
// (driver.CaptureSafety, docs/capture-safety.md); what follows are the
// refusals strict safety adds.

// strictRefusal is the error of a call refused by strict capture safety:
// an unsafe call's refusal (unsafeRefused: ErrCaptureIllegalOp and
// ErrCaptureIncompatibleAllocation) that names the profile.
func (g *guard) strictRefusal(what string, n int) error {
	return unsafeRefused("%s: %d capture(s) active in the capture domain and the device's capture safety is %s; no driver call was made",
		what, n, g.profile)
}

// deviceWideRefusalLocked is the refusal of what, a device-wide call off
// the stream (a synchronous allocation or free, pinning or registering
// host memory): unsafeRefusalLocked's, then strictLocked's.
func (g *guard) deviceWideRefusalLocked(st CaptureState, what string) error {
	if err := g.unsafeRefusalLocked(st, false, what); err != nil {
		return err
	}
	return g.strictLocked(what)
}

// strictLocked returns strictRefusal when strict safety forbids what now:
// any capture active in the domain (the synchronous allocations and frees,
// and host allocation: what hangs GB10 during any capture). Nil otherwise.
func (g *guard) strictLocked(what string) error {
	if !g.strict {
		return nil
	}
	if n := g.dom.active(); n > 0 {
		return g.strictRefusal(what, n)
	}
	return nil
}

// strictRelaxedLocked returns strictRefusal when strict safety forbids
// what now, a call the documented rules would make in Relaxed interaction
// mode (pool growth, graph instantiation): a Global-mode capture active on
// another stream. A capture of another mode elsewhere is no reason: the
// documented rules make these calls then without switching modes, and
// refusing them would keep ranks of one process from capturing side by
// side. Nil otherwise.
func (g *guard) strictRelaxedLocked(what string) error {
	if !g.strictRelaxedForbids() {
		return nil
	}
	return g.strictRefusal(what, g.dom.active())
}

// strictRelaxedForbids is strictRelaxedLocked's condition: strict safety
// and a Global-mode capture active on another stream.
func (g *guard) strictRelaxedForbids() bool {
	return g.strict && g.dom.globalElsewhere(g.stream)
}
