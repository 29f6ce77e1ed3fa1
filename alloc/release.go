package alloc

import "errors"

// Giving memory back: every path that ends a block's life (Free, a graph's
// Close, a failed or abandoned capture, Close) goes through releaseLocked,
// so the two rules below hold everywhere:
//
//   - memory that recorded work of a live graph (or of the capture now
//     recording) uses is never reused or freed before that graph is
//     closed: such a block is held, not released (block.refs);
//   - an unsafe free (the synchronous Free of an AllocSync block, a pinned
//     host free, the stream's last synchronize) never runs while a capture
//     forbids it: it runs under the guard at once, or when the domain's
//     last Global-mode capture ends (cleanup). Nothing is leaked and no
//     other allocator's capture is invalidated.

// refLocked records that capture c's recorded work uses b, so b's memory
// outlives the graph. Blocks the capture allocated itself belong to the
// graph already. Caller holds a.mu.
func (a *Allocator) refLocked(c *capture, b *block) {
	if b == nil || (b.kind == kindGraph && b.cap == c) || b.lastCap == c {
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
func (a *Allocator) unrefLocked(b *block) {
	if b.refs.Add(-1) == 0 && b.held.CompareAndSwap(true, false) {
		a.releaseNowLocked(b)
	}
}

// releaseLocked gives a retired block's memory back: a pooled block to the
// pool; an AllocSync block to the queue flushReleases frees; a graph's
// block to the driver (FreeAsync when a launch materialized it; otherwise
// the driver released it with the graph). A block still referenced by a
// capture or live graph is held instead. Caller holds a.mu.
func (a *Allocator) releaseLocked(b *block) {
	if b.refs.Load() > 0 {
		b.held.Store(true) // every reference is dropped under a.mu: no race
		return
	}
	b.held.Store(false)
	a.releaseNowLocked(b)
}

// releaseNowLocked is releaseLocked for a block nothing references.
func (a *Allocator) releaseNowLocked(b *block) {
	switch b.kind {
	case kindPooled:
		a.prof.dropBlock(b) // the others' go in releasedLocked
		a.cacheLocked(b)
	case kindSync:
		a.pending = append(a.pending, b)
		a.releasedLocked(b)
	case kindGraph:
		if b.materialized {
			if err := a.drv.FreeAsync(b.ptr, a.stream); err != nil {
				a.opts.logger().Warn("capalloc: freeing graph allocation", "backend", a.backend, "err", err)
			}
		}
		a.releasedLocked(b)
		b.cap = nil
	}
}

// releasedLocked counts b's memory as given back to the driver.
func (a *Allocator) releasedLocked(b *block) {
	a.prof.dropBlock(b)
	a.givenBackLocked(b.class)
}

// givenBackLocked counts n bytes of one driver allocation as given back.
func (a *Allocator) givenBackLocked(n int64) {
	a.stats.DriverFrees++
	a.stats.BytesReserved -= n
}

// pinLocked marks b's memory in use by a blocking driver call made without
// a.mu (a pageable copy, an IPC export) until unpinLocked. It is a
// reference like a graph's (block.refs): a release meanwhile (Free, Close)
// holds the memory instead of giving it back, a Graph.Close of the graph
// that owns b leaves the graph's destruction to the last unpin, and Close
// leaves its teardown to it (a.pins). So the driver never gets a call on
// memory that was freed, or handed to someone else, under it. Caller holds
// a.mu.
func (a *Allocator) pinLocked(b *block) {
	b.refs.Add(1)
	a.pins++
	if b.kind == kindGraph && b.cap != nil {
		b.cap.pins++
	}
}

// unpinLocked ends a pinLocked hold, making the release it held back: the
// block's (AllocSync memory is queued for flushReleases), the owning
// graph's destruction. Close's teardown is the caller's to make
// (afterUnpin). Caller holds a.mu.
func (a *Allocator) unpinLocked(b *block) {
	a.pins--
	if c := b.cap; b.kind == kindGraph && c != nil {
		c.pins--
		if g := c.closedGraph; c.pins == 0 && g != nil {
			c.closedGraph = nil
			a.destroyGraphLocked(g)
		}
	}
	a.unrefLocked(b)
}

// afterUnpin makes what an unpin let through: the AllocSync frees it
// queued and Close's teardown if it was waiting for the call. Called
// without a.mu; clean is cleanup, or cleanupLate in a watchdog's late path.
func (a *Allocator) afterUnpin(clean cleaner) {
	a.flushReleasesWith(clean)
	a.finishClose(clean)
}

// flushReleases frees the AllocSync blocks releaseLocked queued, through
// cleanup. Called without a.mu.
func (a *Allocator) flushReleases() { a.flushReleasesWith(a.cleanup) }

// flushReleasesWith is flushReleases through clean.
func (a *Allocator) flushReleasesWith(clean cleaner) {
	a.mu.Lock()
	bs := a.pending
	a.pending = nil
	a.mu.Unlock()
	if len(bs) == 0 {
		return
	}
	if err := clean("Free", func() error {
		var errs []error
		for _, b := range bs {
			errs = append(errs, a.drv.Free(b.ptr))
		}
		return errors.Join(errs...)
	}); err != nil {
		a.opts.logger().Warn("capalloc: deferred free", "backend", a.backend, "err", err)
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
func (a *Allocator) cleanup(op string, fn func() error) error {
	_, err := a.watchdog.run(op, a.watchdog.timeout, func() error {
		return a.dom.nowOrAfter(a.strict, fn, a.logged(op, fn))
	}, nil)
	return err
}

// cleanupLate is cleanup for a watchdog's late path, where an abandoned
// call has finally returned: nobody waits for it, and a watched call would
// not even be attempted while another call is stuck (and what fn should
// free would leak). fn runs, or is queued, directly.
func (a *Allocator) cleanupLate(op string, fn func() error) error {
	return a.dom.nowOrAfter(a.strict, fn, a.logged(op, fn))
}

// logLate logs the error of cleanup made in a watchdog's late path, where
// nobody is left to return it to.
func (a *Allocator) logLate(op string, err error) {
	if err != nil {
		a.opts.logger().Warn("capalloc: "+op+" (releasing what an abandoned call acquired)", "backend", a.backend, "err", err)
	}
}

// logged is fn for the domain's queue, which logs its error.
func (a *Allocator) logged(op string, fn func() error) func() {
	return func() {
		if err := fn(); err != nil {
			a.opts.logger().Warn("capalloc: "+op+" (deferred until captures ended)", "backend", a.backend, "err", err)
		}
	}
}
