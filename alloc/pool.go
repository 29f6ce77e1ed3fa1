package alloc

import (
	"errors"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The pool caches device memory the way PyTorch's caching allocator does,
// measured to waste a fraction of what whole-size-class caching wastes
// (BENCHMARKS.md, "Pool fragmentation"): requests are rounded to 512 B and
// carved out of driver allocations (segments); small requests share 2 MiB
// segments, medium ones 20 MiB segments, large ones get a segment of their
// own rounded to 2 MiB. A request takes the best-fitting free block of its
// arena (fitIndex), split when the rest is worth keeping; a freed block is
// merged with free neighbours; a segment goes back to the driver only when
// wholly free, and only under memory pressure (as much as needed), Trim or
// Close. Reuse needs no event: every block is used on the allocator's one
// stream, so a later user's work is stream-ordered after the earlier one's.
//
// The pool's own methods are geometry and bookkeeping only: they know
// nothing of captures, locks or counters; the Allocator's steps of a
// request through it (takeLocked, growLocked) are written here beside
// them, so a miss reads straight through one file. Its memory comes from an upstream (pool_upstream.go)
// the Allocator supplies, which makes the driver calls behind the guard;
// when the upstream runs out, the reclaim ladder (pool_reclaim.go) decides
// what to give back. The Allocator serializes every call (a.mu).

const (
	poolGranule   = 1 << granBits // request rounding
	smallRequest  = 1 << 20       // at most this: the small arena
	smallSegment  = 2 << 20
	mediumRequest = 10 << 20 // below this (and above smallRequest): 20 MiB segments
	mediumSegment = 20 << 20
	largeRound    = 2 << 20
)

// segment is one driver allocation the pool carves blocks from.
type segment struct {
	ptr        driver.DevicePtr
	size       int64
	first      *block // lowest-addressed block; the others follow by segNext
	ar         *arena
	prev, next *segment
	exp        *expandable // an expandable range (expandable.go): size counts what is mapped
	idleSince  uint64      // pool.clock when it last became one free block (gc.go: least recently used first)
}

// arena is one family of segments (small or large) and its free blocks.
// Keeping small requests out of large segments stops a few long-lived small
// buffers from pinning large segments.
type arena struct {
	free     fitIndex
	segs     *segment // every segment of the arena, most recent first
	splitMin int64    // a split leaves at least this much as a free block

	exp *expandable // the arena's expandable range, once reserved (expandable.go)
}

type pool struct {
	small, large arena
	cached       int64 // bytes in free blocks, recent ones included
	granule      int64 // request rounding: poolGranule or the device's alignment
	spare        *block

	// recent holds the last few freed blocks whole, not yet merged, so an
	// engine that frees and allocates the same sizes (the common loop)
	// skips the split and the merge: an exact fit is a best fit. Any
	// other request merges them all first, so best fit sees every free
	// byte as if they had been merged when freed.
	recent  [recentBlocks]*block // oldest first
	nRecent int

	clock uint64 // counts segments becoming wholly free: their segment.idleSince
	// The growth's release hysteresis (makeRoomLocked, gc.go's regretted):
	// given holds the sizes of the last segments a growth gave back, once
	// those of them a growth needed again once; grace is what the slack
	// grew by for sizes needed again a second time.
	given, once [givenSizes]int64
	grace       int64
	up          poolUpstream // memory, and the reclaim ladder's rungs that are not the pool's
	owner       *Allocator   // the block records' (block.a)
	device      int64        // the device's memory: sizes the expandable ranges
}

// poolUpstream is what the pool is made over: its memory's source and the
// reclaim ladder's hooks, both the Allocator's (driverUpstream).
type poolUpstream interface {
	upstream
	reclaimEnv
}

const recentBlocks = 8

// givenSizes is how many given-back segment sizes the growth's release
// hysteresis remembers.
const givenSizes = 8

// init readies the pool for a device of the given alignment and memory,
// its blocks recorded as owner's, its memory from up.
func (p *pool) init(owner *Allocator, alignment, device int64, up poolUpstream) {
	p.owner, p.device, p.up = owner, device, up
	p.granule = poolGranule
	for p.granule < alignment {
		p.granule <<= 1
	}
	p.small.splitMin = p.granule
	p.large.splitMin = smallRequest + 1 // PyTorch's rule: large remainders only
}

// round is the bytes a request of n takes from a segment.
func (p *pool) round(n int64) int64 { return (n + p.granule - 1) &^ (p.granule - 1) }

func (p *pool) arenaFor(n int64) *arena {
	if n <= smallRequest {
		return &p.small
	}
	return &p.large
}

// segmentSize is the driver allocation made for a miss of rounded size n.
func segmentSize(n int64) int64 {
	switch {
	case n <= smallRequest:
		return smallSegment
	case n < mediumRequest:
		return mediumSegment
	}
	return (n + largeRound - 1) &^ (largeRound - 1)
}

// A request's way through the pool, read in one place: the per-P caches
// flushed in (once a lane Free has used them), a cached
// block (get: recent, then best fit), else growth: the guard's verdict,
// the expandable range, the slack check that gives old segments back,
// then a new segment (grow) from the upstream, climbing the reclaim
// ladder when it runs out. These are the Allocator's steps (they read
// its guard, lane and counters; caller holds a.mu); the pool's own below
// know nothing of them.

// takeLocked is the block for an allocation of size bytes outside
// capture, and what the lane's shards owed to the bytes in use, for the
// hand-out to publish with the allocation (one update of the meter, not
// two; 0 after a growth, which publishes it first for the reclaim ladder
// to read).
func takeLocked(a *Allocator, size int64, mayGrow bool) (b *block, owed int64, err error) {
	// The lane found no block of this size in the caller's shard: best fit
	// sees every cached block, as the pool's recent ones (shard.go).
	if a.lane.used.Load() {
		owed = a.lane.flushOwedLocked()
	}
	if b = a.pool.get(size); b != nil {
		a.stats.PoolHits++
		return b, owed, nil
	}
	if owed != 0 {
		a.stats.inUse.add(owed) // before the reclaim ladder reads it
	}
	a.stats.PoolMisses++
	b, err = growLocked(a, size, mayGrow)
	if errors.Is(err, ErrOutOfMemory) {
		return nil, 0, outOfMemory(a, size, "", err)
	}
	if err != nil {
		return nil, 0, err
	}
	if a.gcAt != 0 && a.stats.BytesReserved > a.gcAt {
		collectLocked(a, "Alloc")
	}
	return b, 0, nil
}

// growLocked serves a miss of size bytes the pool of a could not serve
// from its cache: from the expandable range while the guard allows
// mapping, else from a new segment (pool.grow). Kept out of takeLocked,
// whose hit path it would slow. Caller holds a.mu.
func growLocked(a *Allocator, size int64, mayGrow bool) (*block, error) {
	// Strict: no pool growth that the documented rules would make in
	// Relaxed interaction mode (another stream's Global capture). The
	// guard's verdict was read with the state; asked again when it refused.
	if !mayGrow {
		if err := a.guard.strictRelaxedLocked("pool growth"); err != nil {
			return nil, err
		}
	}
	// Mapping is an unsafe call: only while the guard allows one now, the
	// gate tried (a.mu is held: never waited for), no Global-mode capture
	// elsewhere in the domain.
	if a.vm != nil && a.guard.dom.gate.TryRLock() {
		var (
			b   *block
			ok  bool // the expandable range served it
			err error
		)
		if a.guard.unsafeAllowedLocked(StateNone, false) == nil {
			headroom := int64(expandSlack*float64(a.stats.inUse.peak.Load())) - a.stats.BytesReserved
			b, ok, err = a.pool.growExpandable(size, headroom)
		}
		a.guard.dom.gate.RUnlock()
		if ok {
			return b, err
		}
	}
	makeRoomLocked(a, size)
	return a.pool.grow(size)
}

// segmentSlack is how far past the peak in use plain segments may take
// reserved memory before a growth gives back wholly free cached segments,
// least recently used first (the reclaim ladder's pathGrowth row): segments
// cached for sizes the engine no longer asks for go back instead of adding
// to the peak (expandSlack is the expandable ranges' own).
const segmentSlack = 1.20

// graceMax bounds pool.grace, the slack the release hysteresis adds, as a
// fraction of the peak in use: at most 1.4 times the peak in use in all.
const graceMax = 0.20

// makeRoomLocked gives back, before a new segment for a request of size
// bytes, the wholly free cached segments that would take reserved past
// segmentSlack times the peak in use (the request's included), plus the
// release hysteresis's grace: a growth that needs, for the second time
// lately, a segment of a size a growth gave back shows an engine cycling
// through more memory than the slack holds (a training loop's steps), so
// giving back costs a driver allocation per cycle; the slack grows by
// that segment, up to graceMax. With nothing cached there is nothing to
// give back. Caller holds a.mu.
func makeRoomLocked(a *Allocator, size int64) {
	if a.pool.cached == 0 {
		return
	}
	in := &a.stats.inUse
	peak := max(in.peak.Load(), in.cur.Load()+size)
	seg := segmentSize(a.pool.round(size))
	p := &a.pool
	if p.regretted(seg) {
		p.grace = min(p.grace+seg, int64(graceMax*float64(peak)))
	}
	over := a.stats.BytesReserved + seg - int64(segmentSlack*float64(peak)) - p.grace
	if over > 0 && a.pool.cached >= over {
		releaseOldestLocked(a, pathGrowth, "Alloc", over)
	}
}

// get takes a free block for a request of size bytes, split to the
// rounded size when the rest is worth keeping, or returns nil. With
// nothing cached (a cold pool) there is nothing to look for.
func (p *pool) get(size int64) *block {
	if p.cached == 0 {
		return nil
	}
	n := p.round(size)
	for i := p.nRecent - 1; i >= 0; i-- { // the latest first: still hot in caches
		if b := p.recent[i]; b.class == n {
			b.cached = false
			copy(p.recent[i:], p.recent[i+1:p.nRecent])
			p.nRecent--
			p.recent[p.nRecent] = nil
			p.cached -= n
			return b
		}
	}
	ar := p.arenaFor(n)
	p.mergeRecent() // a best fit must see every free byte merged
	b := ar.free.find(n)
	if b == nil {
		return nil
	}
	if e := b.seg.exp; e != nil { // where in b matters (expandable_place.go)
		return p.carve(e, b, e.startIn(b, n), n)
	}
	p.claim(ar, b, n)
	return b
}

// claim takes b, a free block in ar's fit index, out of the pool's free
// memory, split to n bytes when the rest is worth keeping.
func (p *pool) claim(ar *arena, b *block, n int64) {
	ar.free.remove(b)
	b.free = false
	p.cached -= b.class
	p.split(ar, b, n)
}

// split cuts b, not free, to n bytes when the rest is worth keeping as a
// free block of its own.
func (p *pool) split(ar *arena, b *block, n int64) {
	rest := b.class - n
	if rest < ar.splitMin {
		return
	}
	r := p.record()
	r.ptr, r.class, r.kind, r.seg = b.ptr+driver.DevicePtr(n), rest, kindPooled, b.seg
	r.segPrev, r.segNext = b, b.segNext
	if b.segNext != nil {
		b.segNext.segPrev = r
	}
	b.segNext = r
	b.class = n
	p.cached += rest
	p.putFree(ar, r)
}

// addSegment records a fresh driver allocation of size bytes as a segment
// of n's arena and returns its first block cut to n bytes, not free.
func (p *pool) addSegment(ptr driver.DevicePtr, size, n int64) *block {
	ar := p.arenaFor(n)
	s := &segment{ptr: ptr, size: size, ar: ar}
	b := p.record()
	b.ptr, b.class, b.kind, b.seg = ptr, size, kindPooled, s
	s.first = b
	ar.link(s)
	p.split(ar, b, n)
	return b
}

// grow makes a new segment for a request of size bytes the pool could
// not serve and returns the request's block: a segment of the usual size
// (pathSegment), else (a device too small for it) one of just the rounded
// request (pathSegmentExact), each climbing the reclaim ladder as far as
// its row allows when the upstream runs out.
func (p *pool) grow(size int64) (*block, error) {
	n := p.round(size)
	size, pa := segmentSize(n), pathSegment
	if size == n {
		pa = pathSegmentExact
	}
	for {
		ptr, err := p.up.allocate(size)
		if err != nil {
			try := func() (err error) {
				ptr, err = p.up.allocate(size)
				return err
			}
			r := reclaim{p: p, path: pa, op: "Alloc", need: size}
			err = r.climb(err, try)
		}
		if err == nil {
			return p.addSegment(ptr, size, n), nil
		}
		if pa == pathSegmentExact || !errors.Is(err, ErrOutOfMemory) {
			return nil, err
		}
		size, pa = n, pathSegmentExact
	}
}

func (p *pool) putFree(ar *arena, b *block) {
	b.free = true
	ar.free.insert(b)
}

// record returns a block record of the owner's, its pool fields clear,
// recycled when one is spare, so the steady state of split and merge
// allocates nothing. The caller sets its kind.
func (p *pool) record() *block {
	if b := p.spare; b != nil {
		p.spare = b.segNext
		b.segNext = nil
		return b
	}
	return &block{a: p.owner, kind: kindPooled}
}

// link makes s the arena's most recent segment.
func (ar *arena) link(s *segment) {
	s.next = ar.segs
	if s.next != nil {
		s.next.prev = s
	}
	ar.segs = s
}
