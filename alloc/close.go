package alloc

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Close releases everything the allocator holds and destroys its stream. A
// capture still open is aborted. Buffers, host buffers and graphs still
// alive are released too, and reported in an error wrapping ErrLeaked. The
// driver stays open: it belongs to the caller.
//
// Close returns at once even when the teardown must wait: for a capture
// the watchdog abandoned (until its function or driver call returns, it
// may still record, so nothing is freed into it and its stream is not
// destroyed under it), or for a blocking call still using a buffer's
// memory. The last of them to return ends the capture and runs the
// teardown (an error then is logged).
//
// With Options.HistoryFile set, Close waits, once the allocator's lock is
// released, for the file's write in progress (FlushHistoryFile); its
// error was logged and is not Close's.
func (a *Allocator) Close() error {
	a.mu.Lock()
	a.guard.awaitTransitionLocked()
	if a.guard.closed {
		a.mu.Unlock()
		return a.fail("Close", -1, StateNone, wrapf(ErrClosed, "allocator closed twice"))
	}
	a.guard.closed = true
	a.stats.hist.close() // its clock: the events stay
	a.lane.closeLocked() // for good: every call from now on is the locked path's
	unregister(a)
	leaks := leaksLocked(a)
	errs := a.teardownLocked(a.releases.cleanup)
	_ = a.stats.hist.flushFile() // teardownLocked released a.mu
	if len(leaks) > 0 {
		errs = append([]error{fmt.Errorf("%w: %w", ErrLeaked, errors.Join(leaks...))}, errs...)
	}
	if len(errs) > 0 {
		return a.fail("Close", -1, StateNone, errors.Join(errs...))
	}
	return nil
}

// leaksLocked lists what Close finds alive in a: an open capture, and the
// graphs, buffers, host buffers and graph pools the caller did not
// release (a graph's buffers, and a capture's, go with it), each graph
// and pool by name. Caller holds a.mu.
func leaksLocked(a *Allocator) []error {
	var leaks []error
	if c := a.guard.cap; c != nil {
		leaks = append(leaks, fmt.Errorf("an open capture (%s) was aborted", graphLabel(c.id, c.name)))
	}
	if n := len(a.graphs); n > 0 {
		leaks = append(leaks, fmt.Errorf("%d graph(s) not closed: %s", n, openGraphsLocked(a)))
	}
	var bytes int64
	n := 0
	for _, b := range a.liveBlocksLocked() {
		if b.ws == "" && b.kind != kindGraph && b.kind != kindShared {
			n++
			bytes += b.size
		}
	}
	if n > 0 {
		leaks = append(leaks, fmt.Errorf("%d buffer(s) of %d B not freed", n, bytes))
	}
	if len(a.hosts) > 0 {
		leaks = append(leaks, fmt.Errorf("%d host buffer(s) of %d B not closed", len(a.hosts), a.stats.HostBytes))
	}
	var open []string
	for _, gp := range sortedPools(a) {
		if !gp.closed {
			open = append(open, gp.label())
		}
	}
	if len(open) > 0 {
		leaks = append(leaks, fmt.Errorf("%d graph pool(s) not closed: %s", len(open), strings.Join(open, ", ")))
	}
	return leaks
}

// maxLeakNames bounds the graphs a leak report names; the rest are
// counted.
const maxLeakNames = 8

// openGraphsLocked names a's open graphs for the leak report, by number,
// each with its pool; a closed pool's memory waits for its graphs, so the
// report says so. Caller holds a.mu.
func openGraphsLocked(a *Allocator) string {
	gs := make([]*Graph, 0, len(a.graphs))
	for g := range a.graphs {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(x, y *Graph) int { return cmp.Compare(x.id, y.id) })
	var names []string
	for i, g := range gs {
		if i == maxLeakNames {
			names = append(names, fmt.Sprintf("and %d more", len(gs)-i))
			break
		}
		name := graphLabel(g.id, g.name)
		if g.cap != nil && g.cap.pool != nil {
			gp := g.cap.pool
			if gp.closed {
				name += " of graph pool " + gp.label() + ", which was closed and kept its memory for this graph"
			} else {
				name += " of graph pool " + gp.label()
			}
		}
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// sortedPools lists a's graph pools not yet disposed, by number. Caller
// holds a.mu.
func sortedPools(a *Allocator) []*GraphPool {
	gps := make([]*GraphPool, 0, len(a.graphPools))
	for gp := range a.graphPools {
		gps = append(gps, gp)
	}
	slices.SortFunc(gps, func(x, y *GraphPool) int { return cmp.Compare(x.id, y.id) })
	return gps
}

// teardownLocked is Close's work on a: it ends a capture still open and
// releases everything. While something still holds it back - a capture
// the watchdog abandoned, a blocking call on a buffer's memory
// (pinLocked) - it leaves a.closing set instead, and the last of them to
// return runs it (finishClose). The unsafe driver calls go through clean.
// Caller holds a.mu, which it releases.
func (a *Allocator) teardownLocked(clean cleaner) []error {
	var errs []error
	if c := a.guard.cap; c != nil && !c.abandoned {
		if g, err := c.endLocked(a.guard.watchdog.timeout); g != nil {
			g.closeLocked() // aborted: its graph is not wanted
		} else if err != nil && !errors.Is(err, ErrCaptureInvalidated) {
			errs = append(errs, err)
		}
	}
	if a.guard.cap != nil || a.releases.pins > 0 {
		a.closing = true
		a.mu.Unlock()
		return errs
	}
	a.closing = false
	for g := range a.graphs {
		g.closeLocked()
	}
	releaseGraphPoolsLocked(a)
	for _, b := range a.liveBlocksLocked() {
		a.retireLocked(b)
		a.releases.releaseLocked(b)
	}
	a.workspaces = map[string]*block{}
	var segs []*segment // strict: freed with the unsafe rest, below
	if a.guard.strict {
		a.lane.flushLocked()
		segs = a.pool.takeAll()
		for _, s := range segs {
			a.stats.givenBackLocked(s.ptr, s.size)
		}
	} else if _, err := a.pool.releaseAll("Close", false); err != nil {
		errs = append(errs, err)
	}
	unmap := driverUpstream{a}.detach() // after the last synchronize, below
	hosts := make([]*HostBuffer, 0, len(a.hosts))
	for h := range a.hosts {
		hosts = append(hosts, h)
	}
	a.hosts = map[*HostBuffer]struct{}{}
	a.stats.HostBuffers, a.stats.HostBytes = 0, 0
	chunks := a.host.takeAllLocked() // the cache's pinnings, those of live buffers included
	syncFrees := a.releases.pending
	a.releases.pending = nil
	a.mu.Unlock()

	// The unsafe rest (synchronous frees, pinned host frees, the stream's
	// last synchronize) runs now if no Global-mode capture forbids it, or
	// once the last one ends: never into another allocator's capture.
	if err := clean("Close", func() error {
		var errs []error
		for _, s := range segs {
			errs = append(errs, a.drv.FreeAsync(s.ptr, a.stream))
		}
		for _, b := range syncFrees {
			errs = append(errs, a.drv.Free(b.ptr))
		}
		for _, h := range hosts {
			if h.closed.CompareAndSwap(false, true) && h.slot == nil {
				errs = append(errs, h.unpin())
			}
		}
		errs = append(errs, a.drv.StreamSynchronize(a.stream))
		errs = append(errs, unpinAll(a.drv.HostFree, chunks))
		if unmap != nil {
			errs = append(errs, unmap())
		}
		errs = append(errs, a.drv.DestroyStream(a.stream))
		return errors.Join(errs...)
	}); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// liveBlocksLocked lists a's live blocks: the AllocSync and graph ones on
// a.live, the pooled ones found in their segments (the lane hands them out
// without a list). Only with the lane closed. Caller holds a.mu.
func (a *Allocator) liveBlocksLocked() []*block {
	var bs []*block
	for b := a.live.head; b != nil; b = b.next {
		bs = append(bs, b)
	}
	for s := range a.pool.segments() {
		for b := range s.blocks() {
			if b.live() {
				bs = append(bs, b)
			}
		}
	}
	return bs
}

// finishClose runs the teardown Close left for later, if it did and
// nothing holds it back any more. Called without a.mu by whatever held it
// back, once that let go; clean as for teardownLocked.
func (a *Allocator) finishClose(clean cleaner) {
	a.mu.Lock()
	if !a.closing || a.guard.cap != nil || a.releases.pins > 0 {
		a.mu.Unlock()
		return
	}
	if err := errors.Join(a.teardownLocked(clean)...); err != nil {
		a.opts.logger().Warn("capalloc: Close (finished once the abandoned capture or the call in flight returned)", "backend", a.backend, "err", err)
	}
}
