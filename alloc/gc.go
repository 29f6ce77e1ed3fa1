package alloc

import (
	"cmp"
	"slices"
)

// Proactive release (Options.GCThreshold, PyTorch's
// garbage_collection_threshold): once the pool's growth takes reserved
// memory past the threshold, wholly free cached segments go back to the
// driver, least recently used first, until reserved is under it again;
// then, under expandable segments, free chunks. It is the reclaim
// ladder's pathThreshold row (pool_reclaim.go). Only the pool's own free
// memory goes: a graph pool's is borrowed (not free in the pool) and
// graph-owned memory is no segment's. It never makes a call the capture
// rules refuse: under strict capture safety it waits while any capture is
// active in the domain (the next growth, or the allocator's EndCapture,
// tries again), and free chunks are unmapped only while the guard allows
// unsafe calls. A cache hit never reaches it: only a miss grows reserved.

// checkGCThreshold refuses a threshold outside [0, 1).
func checkGCThreshold(f float64) error {
	if f == 0 || f > 0 && f < 1 {
		return nil
	}
	return wrapf(ErrInvalidValue, "gc threshold %v is not in (0, 1)", f)
}

// gcAt is the reserved bytes over which the proactive release starts: the
// threshold's fraction of the limit, or of the device; 0 when off.
func gcAt(opts Options, limit, device int64) int64 {
	if opts.GCThreshold == 0 {
		return 0
	}
	if limit == 0 {
		limit = device
	}
	return max(int64(opts.GCThreshold*float64(limit)), 1)
}

// collectLocked gives cached memory back until reserved is at most the
// threshold, where the rules allow it now. A give-back that fails is
// logged: the allocation that grew reserved has succeeded. Caller holds
// a.mu, with no capture of the allocator's recording.
func collectLocked(a *Allocator, op string) {
	if a.gcAt != 0 {
		releaseOldestLocked(a, pathThreshold, op, a.stats.BytesReserved-a.gcAt)
	}
}

// releaseOldestLocked climbs row pa (pathThreshold, pathGrowth) to give
// back over bytes, where the capture rules allow it now.
func releaseOldestLocked(a *Allocator, pa path, op string, over int64) {
	if over <= 0 || a.guard.strictLocked("proactive release") != nil {
		return
	}
	unmap := false
	if a.vm != nil && a.guard.dom.gate.TryRLock() { // unmapping is an unsafe call: never waited for under a.mu
		defer a.guard.dom.gate.RUnlock()
		unmap = a.guard.unsafeAllowedLocked(StateNone, false) == nil
	}
	r := reclaim{p: &a.pool, path: pa, op: op, need: over, unmap: unmap}
	for _, rg := range ladder[pa].rungs {
		if _, err := r.step(rg); err != nil {
			a.opts.logger().Warn("capalloc: proactive release", "backend", a.backend, "err", err)
			return
		}
	}
}

// giveBackOldest is rungOldest: wholly free segments, least recently
// used first, until r.need bytes went back; then, where unmap, free
// chunks for the rest.
func (r *reclaim) giveBackOldest(unmap bool) (bool, error) {
	p := r.p
	segs := p.wholeFree()
	slices.SortFunc(segs, func(x, y *segment) int { return cmp.Compare(x.idleSince, y.idleSince) })
	var got int64
	n := 0
	for n < len(segs) && got < r.need {
		got += segs[n].size
		n++
	}
	if r.path == pathGrowth {
		for _, sg := range segs[:n] {
			p.gave(sg.size)
		}
	}
	gave, err := r.giveBack(p.take(segs[:n]))
	if err != nil || got >= r.need || !unmap {
		return gave, err
	}
	m, err := r.unmapFree(r.need - got)
	return gave || m > 0, err
}

// gave records a segment of n bytes a growth gave back.
func (p *pool) gave(n int64) {
	copy(p.given[1:], p.given[:])
	p.given[0] = n
}

// regretted reports whether a segment of n bytes is one of those a growth
// gave back lately, for the second time or more, and forgets it.
func (p *pool) regretted(n int64) bool {
	for i, g := range p.given {
		if g == n {
			p.given[i] = 0
			for j, o := range p.once {
				if o == n {
					p.once[j] = 0
					return true
				}
			}
			copy(p.once[1:], p.once[:])
			p.once[0] = n
			return false
		}
	}
	return false
}
