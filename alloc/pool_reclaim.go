package alloc

import "errors"

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
)

// reclaim is one out-of-memory path's climb of the reclaim ladder: what
// its retry needs, how high it may climb and what it may do on the way.
type reclaim struct {
	p    *pool
	op   string
	need int64 // bytes the retry needs
	top  rung  // the highest rung the path may climb
	// sync: the retry is not stream-ordered (a synchronous allocation, a
	// mapping), so frees queued on the stream must have run before it, and
	// the trim rung synchronizes first.
	sync bool
	// unmap: free chunks of the expandable ranges may be unmapped (the guard
	// allows unsafe calls now); the stream is drained first, since
	// unmapping is not stream-ordered.
	unmap     bool
	trimPools bool // the trim rung trims the driver's stream-ordered pool too

	// keep is a range being mapped: its chunks in [keepLo, keepHi) stay.
	keep           *expandable
	keepLo, keepHi int64
}

// climb is the reclaim ladder, the one policy of every out-of-memory path
// (pool growth, an expandable range's mapping, AllocSync's synchronous
// allocation; Trim and Close take its top rung directly: releaseAll). err is the
// path's first attempt's; while it is an out-of-memory, climb takes the
// next rung, up to r.top, and makes try again after each that gave
// something back. It returns the last attempt's error, joined with any
// error a rung met (which stops the climb). The order is PyTorch's
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
// retry needs no wait; a sync path drains the stream before retrying.
// Unmapping is not stream-ordered: the stream is drained before it.
func (r *reclaim) climb(err error, try func() error) error {
	for rg := rungFlush; rg <= r.top && errors.Is(err, ErrOutOfMemory); rg++ {
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

// releaseAll is the ladder's top rung taken at once, by a path with no
// request to retry (Trim, Close): every cached segment goes back, and
// every free chunk when unmap (the guard allows unsafe calls now). It
// reports whether anything went back.
func (p *pool) releaseAll(op string, unmap bool) (bool, error) {
	r := reclaim{p: p, op: op, unmap: unmap}
	r.step(rungFlush)
	return r.step(rungAll)
}

// step takes one rung and reports whether it gave anything back.
func (r *reclaim) step(rg rung) (bool, error) {
	p := r.p
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
		if err != nil || got >= r.need || !r.unmap {
			return gave, err
		}
		n, err := r.unmapFree(r.need - got)
		return gave || n > 0, err
	case rungTrim:
		if r.sync {
			if err := p.up.synchronize(r.op); err != nil {
				return false, err
			}
		}
		return p.up.trim(r.trimPools), nil
	case rungAll:
		if err := p.up.mayReleaseAll(); err != nil {
			return false, err
		}
		gave, err := r.giveBack(p.takeAll())
		if r.sync { // the host cache's pinned memory: a call of its own (hostcache.go)
			gave = p.up.releaseHost(r.op) || gave
		}
		if err != nil || !r.unmap {
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
	gave, err := r.p.giveBack(segs)
	switch {
	case !gave || err != nil || !r.sync:
	case r.trimPools:
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
