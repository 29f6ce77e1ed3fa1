package alloc

import (
	"errors"
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Giving memory back: every path that ends a block's life (Free, a graph's
// Close, a failed or abandoned capture, Close) goes through
// releases.releaseLocked, so the two rules below hold everywhere:
//
//   - memory that recorded work of a live graph (or of the capture now
//     recording) uses is never reused or freed before that graph is
//     closed: such a block is held, not released (block.refs);
//   - an unsafe free (the synchronous Free of an AllocSync block, a pinned
//     host free, the stream's last synchronize) never runs while a capture
//     forbids it: it runs under the guard at once, or when the domain's
//     last Global-mode capture ends (cleanup). Nothing is leaked and no
//     other allocator's capture is invalidated.

// releases ends blocks' lives and makes the unsafe frees that follow
// (the rules above). It holds what that needs of the allocator, set by
// init; the fields it keeps are guarded by a.mu (mu).
type releases struct {
	pending []*block // AllocSync blocks released, for flush
	pins    int      // blocking calls in flight on buffers' memory (pinLocked)

	mu       *sync.Mutex // a.mu
	drv      driver.Driver
	stream   driver.Stream
	backend  string
	opts     *Options
	strict   bool
	dom      *domain
	watchdog *watchdog
	lane     *lane
	prof     *memProfile
	stats    *counters
}

// init sets r up for a; after a's stream and watchdog are made.
func (r *releases) init(a *Allocator) {
	r.mu, r.drv, r.stream, r.backend, r.opts = &a.mu, a.drv, a.stream, a.backend, &a.opts
	r.strict, r.dom, r.watchdog = a.guard.strict, a.guard.dom, a.guard.watchdog
	r.lane, r.prof, r.stats = &a.lane, &a.prof, &a.stats
}

// refLocked records that capture c's recorded work uses b, so b's memory
// outlives the graph. Blocks the capture allocated itself belong to the
// graph already. Caller holds a.mu.
func refLocked(c *capture, b *block) {
	if b == nil || ((b.kind == kindGraph || b.kind == kindShared) && b.cap == c) || b.lastCap == c {
		return
	}
	b.lastCap = c
	b.refs.Add(1)
	c.refs = append(c.refs, b)
}

// unrefLocked drops one reference on b, releasing it if it was held for
// references. A lane Free (shard.go) may mark it held without a.mu, so
// the release is claimed by a compare-and-swap: of the last reference and
// that Free, exactly one releases it. Caller holds a.mu.
func (r *releases) unrefLocked(b *block) {
	if b.refs.Add(-1) == 0 && b.held.CompareAndSwap(true, false) {
		r.releaseNowLocked(b)
	}
}

// releaseLocked gives a retired block's memory back: a pooled block to the
// pool; an AllocSync block to the queue flush frees; a graph's block to
// the driver (FreeAsync when a launch materialized it; otherwise the
// driver released it with the graph). A block still referenced by a
// capture or live graph is held instead. Caller holds a.mu.
func (r *releases) releaseLocked(b *block) {
	if b.refs.Load() > 0 {
		b.held.Store(true) // every reference is dropped under a.mu: no race
		return
	}
	if b.held.Load() {
		b.held.Store(false) // a store only when it changes: it is a locked instruction
	}
	r.releaseNowLocked(b)
}

// releaseNowLocked is releaseLocked for a block nothing references.
func (r *releases) releaseNowLocked(b *block) {
	switch b.kind {
	case kindPooled:
		r.prof.dropLocked(b) // the others' go in releasedLocked
		r.lane.cacheLocked(b)
	case kindSync:
		r.pending = append(r.pending, b)
		r.releasedLocked(b)
	case kindGraph:
		if b.materialized {
			if err := r.drv.FreeAsync(b.ptr, r.stream); err != nil {
				r.opts.logger().Warn("capalloc: freeing graph allocation", "backend", r.backend, "err", err)
			}
		}
		r.releasedLocked(b)
		b.cap = nil
	case kindShared:
		r.prof.dropLocked(b)
		b.cap.pool.releaseLocked(b) // the pool's memory, not the driver's
	}
}

// releasedLocked counts b's memory as given back to the driver.
func (r *releases) releasedLocked(b *block) {
	r.prof.dropLocked(b)
	r.stats.givenBackLocked(b.ptr, b.class)
}

// dropLocked forgets b's sample, if it has one, when its memory is
// released. Caller holds a.mu.
func (p *memProfile) dropLocked(b *block) {
	if s := b.prof.Load(); s != nil {
		p.drop(s)
		b.prof.Store(nil)
	}
}

// pinLocked marks b's memory in use by a blocking driver call made without
// a.mu (a pageable copy, an IPC export) until unpinLocked. It is a
// reference like a graph's (block.refs): a release meanwhile (Free, Close)
// holds the memory instead of giving it back, a Graph.Close of the graph
// that owns b leaves the graph's destruction to the last unpin, and Close
// leaves its teardown to it (pins). So the driver never gets a call on
// memory that was freed, or handed to someone else, under it. Caller holds
// a.mu.
func (r *releases) pinLocked(b *block) {
	b.refs.Add(1)
	r.pins++
	if b.kind == kindGraph && b.cap != nil {
		b.cap.pins++
	}
}

// unpinLocked ends a pinLocked hold, making the release it held back: the
// block's (AllocSync memory is queued for flush), the owning graph's
// destruction. Close's teardown is the caller's to make (afterUnpin).
// Caller holds a.mu.
func (a *Allocator) unpinLocked(b *block) {
	a.releases.pins--
	if c := b.cap; b.kind == kindGraph && c != nil {
		c.pins--
		if g := c.closedGraph; c.pins == 0 && g != nil {
			c.closedGraph = nil
			g.destroyLocked()
		}
	}
	a.releases.unrefLocked(b)
}

// afterUnpin makes what an unpin let through: the AllocSync frees it
// queued and Close's teardown if it was waiting for the call. Called
// without a.mu; clean is cleanup, or cleanupLate in a watchdog's late path.
func (a *Allocator) afterUnpin(clean cleaner) {
	a.releases.flushWith(clean)
	a.finishClose(clean)
}

// flush frees the AllocSync blocks releaseLocked queued, through cleanup.
// Called without a.mu.
func (r *releases) flush() { r.flushWith(r.cleanup) }

// flushWith is flush through clean.
func (r *releases) flushWith(clean cleaner) {
	r.mu.Lock()
	bs := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	if err := clean("Free", func() error {
		var errs []error
		for _, b := range bs {
			errs = append(errs, r.drv.Free(b.ptr))
		}
		return errors.Join(errs...)
	}); err != nil {
		r.opts.logger().Warn("capalloc: deferred free", "backend", r.backend, "err", err)
	}
}

// cleaner is cleanup or cleanupLate.
type cleaner func(op string, fn func() error) error

// cleanup makes fn, unsafe driver calls that give back what nobody owns any
// more, without ever running them into a capture: now, under the gate and
// the watchdog, when no Global-mode capture is active in the domain
// (returning fn's error); otherwise queued, to run when the last one ends
// (an error then is logged). Only called when the allocator's own stream
// is not capturing.
func (r *releases) cleanup(op string, fn func() error) error {
	_, err := r.watchdog.run(op, r.watchdog.timeout, func() error {
		return r.dom.nowOrAfter(r.strict, fn, r.logged(op, fn))
	}, nil)
	return err
}

// cleanupLate is cleanup for a watchdog's late path, where an abandoned
// call has finally returned: nobody waits for it, and a watched call would
// not even be attempted while another call is stuck (and what fn should
// free would leak). fn runs, or is queued, directly.
func (r *releases) cleanupLate(op string, fn func() error) error {
	return r.dom.nowOrAfter(r.strict, fn, r.logged(op, fn))
}

// logLate logs the error of cleanup made in a watchdog's late path, where
// nobody is left to return it to.
func (r *releases) logLate(op string, err error) {
	if err != nil {
		r.opts.logger().Warn("capalloc: "+op+" (releasing what an abandoned call acquired)", "backend", r.backend, "err", err)
	}
}

// logged is fn for the domain's queue, which logs its error.
func (r *releases) logged(op string, fn func() error) func() {
	return func() {
		if err := fn(); err != nil {
			r.opts.logger().Warn("capalloc: "+op+" (deferred until captures ended)", "backend", r.backend, "err", err)
		}
	}
}
