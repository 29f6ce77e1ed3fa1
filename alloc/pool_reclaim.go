package alloc

import (
	"cmp"
	"errors"
	"slices"
)

// rung is a step of the reclaim ladder, in the order they are climbed.
type rung uint8

const (
	// rungFlush: every free byte into the pool, the per-P caches flushed
	// and the recent frees merged, so the rungs above see every cached
	// segment whole. It gives nothing back.
	rungFlush rung = iota
	// rungAsNeeded: cached whole-free segments, then free chunks of the
	// expandable ranges, as few as make room for the request.
	rungAsNeeded
	// rungTrim: the driver's own caches, once the stream has run the
	// frees queued on it: the memory closed graphs left (GraphMemTrimmer)
	// and the stream-ordered pool (PoolTrimmer).
	rungTrim
	// rungAll: every cached whole-free segment and every free chunk.
	rungAll
	// rungOldest: cached whole-free segments, least recently used first,
	// until need bytes went back, then free chunks for the rest: the
	// proactive release's (gc.go), with no request to retry.
	rungOldest
)

// path is one of the allocator's out-of-memory paths: a row of ladder.
type path uint8

const (
	// pathSegment: pool growth (Alloc's miss), a segment of the usual size.
	pathSegment path = iota
	// pathSegmentExact: pool growth once pathSegment failed, a segment of
	// just the request (a device too small for the usual size).
	pathSegmentExact
	// pathMapChunk: a chunk of an expandable range being mapped (Alloc's
	// miss, the guard allowing unsafe calls now).
	pathMapChunk
	// pathAllocSync: AllocSync's synchronous allocation, retried with a.mu
	// released and the gate's shared side held.
	pathAllocSync
	// pathRelease: Trim and Close, with no request to retry: every cached
	// segment back at once.
	pathRelease
	// pathThreshold: the proactive release (Options.GCThreshold, gc.go),
	// with no request to retry: reserved back under the threshold.
	pathThreshold
	// pathGrowth: before a new plain segment, wholly free cached segments
	// past segmentSlack times the peak in use (pool.go), with no request to
	// retry; the per-P caches are left as they are (a growth is common).
	pathGrowth
)

// ladder is the one table of how far each out-of-memory path climbs and
// what it may do on the way; nothing else sets either. The graph pools
// are on no path: they borrow from the allocator's cache and make no
// driver call (graphpool.go). No driver retries on its own: a driver
// reports an out-of-memory, the ladder decides what to give back.
var ladder = [...]struct {
	rungs []rung // climbed in this order, each while the retry still runs out of memory
	// sync: the retry is not stream-ordered (a synchronous allocation, a
	// mapping), so the frees a give-back queued on the stream must have run
	// before it, and the trim rung synchronizes first.
	sync bool
	// unmap: free chunks of the expandable ranges may be unmapped, where
	// the caller says it may now (reclaim.unmap: there are ranges, and the
	// guard allows unsafe calls); the stream is drained first, since
	// unmapping is not stream-ordered.
	unmap bool
	// trimPools: the trim rung trims the driver's stream-ordered pool too,
	// and a give-back is followed by a synchronize and that trim (the
	// path holds the gate).
	trimPools bool
}{
	pathSegment:      {rungs: []rung{rungFlush, rungAsNeeded}},
	pathSegmentExact: {rungs: []rung{rungFlush, rungAsNeeded, rungTrim, rungAll}},
	pathMapChunk:     {rungs: []rung{rungFlush, rungAsNeeded, rungTrim, rungAll}, sync: true, unmap: true},
	pathAllocSync:    {rungs: []rung{rungFlush, rungAsNeeded, rungTrim, rungAll}, sync: true, unmap: true, trimPools: true},
	pathRelease:      {rungs: []rung{rungFlush, rungAll}, unmap: true},
	pathThreshold:    {rungs: []rung{rungFlush, rungOldest}, unmap: true},
	pathGrowth:       {rungs: []rung{rungOldest}},
}

// reclaim is one climb of the ladder: the path's row, and what this
// climb's retry needs.
type reclaim struct {
	p     *pool
	path  path
	op    string
	need  int64 // bytes the retry needs
	unmap bool  // free chunks may be unmapped now, if the path's row allows it

	// keep is a range being mapped: its chunks in [keepLo, keepHi) stay.
	keep           *expandable
	keepLo, keepHi int64
}

// climb is the reclaim ladder, the one policy of every out-of-memory path.
// err is the path's first attempt's; while it is an out-of-memory, climb
// takes the path's next rung (ladder) and makes try again after each that
// gave something back. It returns the last attempt's error, joined with
// any error a rung met (which stops the climb). The order is PyTorch's
// CUDACachingAllocator malloc's, cheapest first:
//
//  1. rungFlush: the caller has looked for a free block already; the lane's
//     per-P caches and the recent frees are merged in, so the rungs above
//     see every free byte (and a whole-free segment as one).
//  2. rungAsNeeded: give back as few cached whole-free segments as make room
//     (the smallest that fits, else the largest first), then unmap free
//     expandable chunks outside the range being mapped for the rest: the
//     engine's next step still finds the rest of its cache.
//  3. rungTrim: synchronize (sync paths) and ask the driver to trim the
//     memory it caches itself: cheaper for the engine than losing its
//     own cache, and only the driver knows it holds any.
//  4. rungAll: give back every cached segment and unmap every free chunk
//     (refused under strict capture safety while any capture is active).
//  5. fail: the out-of-memory is returned, with the stats the caller adds.
//
// Giving back a segment is stream-ordered (FreeAsync), so a stream-ordered
// retry needs no wait: the driver reuses the stream's own frees (CUDA's
// pool; cpu and the fake runtimes model it); a sync path drains the
// stream before retrying. Unmapping is not stream-ordered: the stream is
// drained before it.
func (r *reclaim) climb(err error, try func() error) error {
	for _, rg := range ladder[r.path].rungs {
		if !errors.Is(err, ErrOutOfMemory) {
			break
		}
		freed, rerr := r.step(rg)
		if rerr != nil {
			return errors.Join(err, rerr)
		}
		if freed {
			r.p.up.retried()
			err = try()
		}
	}
	return err
}

// releaseAll climbs pathRelease's rungs, for a path with no request to
// retry (Trim, Close): every cached segment goes back, and every free
// chunk when unmap (the guard allows unsafe calls now). It reports
// whether anything went back.
func (p *pool) releaseAll(op string, unmap bool) (gave bool, err error) {
	r := reclaim{p: p, path: pathRelease, op: op, unmap: unmap}
	for _, rg := range ladder[pathRelease].rungs {
		var g bool
		g, err = r.step(rg)
		gave = gave || g
		if err != nil {
			break
		}
	}
	return gave, err
}

// step takes one rung and reports whether it gave anything back.
func (r *reclaim) step(rg rung) (bool, error) {
	p, row := r.p, &ladder[r.path]
	unmap := r.unmap && row.unmap
	switch rg {
	case rungFlush:
		p.up.flush()
		p.mergeRecent()
		return false, nil
	case rungAsNeeded:
		segs := p.takeFor(r.need)
		var got int64
		for _, s := range segs {
			got += s.size
		}
		gave, err := r.giveBack(segs)
		if err != nil || got >= r.need || !unmap {
			return gave, err
		}
		n, err := r.unmapFree(r.need - got)
		return gave || n > 0, err
	case rungTrim:
		if row.sync {
			if err := p.up.synchronize(r.op); err != nil {
				return false, err
			}
		}
		return p.up.trim(row.trimPools), nil
	case rungOldest:
		return r.giveBackOldest(unmap)
	case rungAll:
		if err := p.up.mayReleaseAll(); err != nil {
			return false, err
		}
		gave, err := r.giveBack(p.takeAll())
		if row.sync { // the host cache's pinned memory: a call of its own (hostcache.go)
			gave = p.up.releaseHost(r.op) || gave
		}
		if err != nil || !unmap {
			return gave, err
		}
		n, err := r.unmapFree(-1)
		return gave || n > 0, err
	}
	return false, nil
}

// giveBack returns segments to the upstream; on a sync path it waits for
// the frees to run and, where the path may trim the driver's pool,
// synchronizes and trims it: a segment goes back with a stream-ordered
// free into the driver's pool, which keeps it (its release threshold is
// everything), so without the trim a synchronous retry would not see the
// memory at all, and the trim releases only frees the host observed at a
// synchronize. Found on an H200: AllocSync failed with the whole device
// given back (testdata/gpu/nvidia-h200-2026-11-27).
func (r *reclaim) giveBack(segs []*segment) (bool, error) {
	row := &ladder[r.path]
	gave, err := r.p.giveBack(segs)
	switch {
	case !gave || err != nil || !row.sync:
	case row.trimPools:
		if err = r.p.up.synchronize(r.op); err == nil {
			r.p.up.trim(true)
		}
	default:
		err = r.p.up.drain(r.op)
	}
	return gave, err
}

// unmapFree drains the stream and unmaps up to limit bytes (< 0: all) of
// free chunks outside the kept range, when there is a range.
func (r *reclaim) unmapFree(limit int64) (int64, error) {
	p := r.p
	if p.small.exp == nil && p.large.exp == nil {
		return 0, nil
	}
	if err := p.up.drain(r.op); err != nil {
		return 0, err
	}
	keep := r.keep
	if keep == nil {
		if keep = p.large.exp; keep == nil {
			keep = p.small.exp
		}
	}
	return p.unmapFree(limit, keep, r.keepLo, r.keepHi)
}

// What the ladder takes out of the pool: wholly free segments.

// wholeFree lists the segments that are one free block, small arena first,
// each arena most recent first, with the recent blocks merged so none is
// missed.
func (p *pool) wholeFree() []*segment {
	p.mergeRecent()
	var out []*segment
	for s := range p.segments() {
		if b := s.first; s.exp == nil && b.free && b.segNext == nil {
			out = append(out, s)
		}
	}
	return out
}

// take removes wholly free segments (from wholeFree) from the pool and
// returns them, for the caller to give back to the driver.
func (p *pool) take(segs []*segment) []*segment {
	for _, s := range segs {
		ar := s.ar
		ar.free.remove(s.first)
		p.cached -= s.first.class
		p.recycle(s.first)
		ar.unlink(s)
	}
	return segs
}

// unlink takes s out of the arena's list of segments.
func (ar *arena) unlink(s *segment) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		ar.segs = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
}

// takeAll removes every wholly free segment.
func (p *pool) takeAll() []*segment { return p.take(p.wholeFree()) }

// takeFor removes as few wholly free segments as make room for n bytes:
// the smallest one of at least n, or else the largest ones until their
// sizes add up to n (all of them when they do not).
func (p *pool) takeFor(n int64) []*segment {
	segs := p.wholeFree()
	var fit *segment
	for _, s := range segs {
		if s.size >= n && (fit == nil || s.size < fit.size) {
			fit = s
		}
	}
	if fit != nil {
		return p.take([]*segment{fit})
	}
	slices.SortFunc(segs, func(x, y *segment) int { return cmp.Compare(y.size, x.size) })
	var sum int64
	for i, s := range segs {
		if sum >= n {
			return p.take(segs[:i])
		}
		sum += s.size
	}
	return p.take(segs)
}

// giveBack returns segments the pool took out to the upstream and reports
// whether there were any. A segment whose free fails is still gone: the
// driver has it, not the pool.
func (p *pool) giveBack(segs []*segment) (bool, error) {
	var errs []error
	for _, s := range segs {
		errs = append(errs, p.up.free(s.ptr, s.size))
	}
	return len(segs) > 0, errors.Join(errs...)
}
