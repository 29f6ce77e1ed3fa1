package alloc

import (
	"cmp"
	"errors"
	"slices"

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
// The pool is geometry and bookkeeping only: it knows nothing of captures,
// locks or counters. Its memory comes from an upstream (pool_upstream.go)
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

	clock  uint64       // counts segments becoming wholly free: their segment.idleSince
	up     poolUpstream // memory, and the reclaim ladder's rungs that are not the pool's
	owner  *Allocator   // the block records' (block.a)
	device int64        // the device's memory: sizes the expandable ranges
}

// poolUpstream is what the pool is made over: its memory's source and the
// reclaim ladder's hooks, both the Allocator's (driverUpstream).
type poolUpstream interface {
	upstream
	reclaimEnv
}

const recentBlocks = 8

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

// get takes a free block for a request of size bytes, split to the
// rounded size when the rest is worth keeping, or returns nil.
func (p *pool) get(size int64) *block {
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

// put returns a freed block to the pool: to recent, moving the oldest
// recent one to its arena when recent is full.
func (p *pool) put(b *block) {
	p.cached += b.class
	b.cached = true
	if p.nRecent < recentBlocks {
		p.recent[p.nRecent] = b
		p.nRecent++
		return
	}
	old := p.recent[0] // the oldest goes; the order stays oldest first
	copy(p.recent[:], p.recent[1:])
	p.recent[recentBlocks-1] = b
	p.merge(old)
}

// mergeRecent moves every recent block to its arena.
func (p *pool) mergeRecent() {
	for i := 0; i < p.nRecent; i++ {
		p.merge(p.recent[i])
		p.recent[i] = nil
	}
	p.nRecent = 0
}

// merge puts a block, counted in cached already, in its arena's index,
// merged with its free neighbours.
func (p *pool) merge(b *block) {
	b.cached = false
	ar := b.seg.ar
	if n := b.segNext; n != nil && n.free {
		ar.free.remove(n)
		p.absorb(b, n)
	}
	if q := b.segPrev; q != nil && q.free {
		ar.free.remove(q)
		p.absorb(q, b)
		b = q
	}
	if b.segPrev == nil && b.segNext == nil { // the segment is one free block now
		p.clock++
		b.seg.idleSince = p.clock
	}
	p.putFree(ar, b)
}

// absorb grows lo over hi, its next neighbour, and recycles hi's record.
func (p *pool) absorb(lo, hi *block) {
	lo.class += hi.class
	lo.segNext = hi.segNext
	if lo.segNext != nil {
		lo.segNext.segPrev = lo
	}
	p.recycle(hi)
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

// recycle keeps a record for record(). It resets only the fields the pool
// sets: a and state stay (state so stale handles stay stale; a because a
// lane Free reads it from a stale handle's record without a.mu, shard.go),
// and a pool block's ws, prof and references are clear. The taker sets
// kind (a pooled block or a hole of an expandable range).
func (p *pool) recycle(b *block) {
	b.ptr, b.size, b.class, b.seg = 0, 0, 0, nil
	b.segPrev, b.segNext, b.freePrev, b.freeNext = nil, p.spare, nil, nil
	b.bucket, b.free, b.cached, b.lastCap = 0, false, false, nil
	p.spare = b
}

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

// link makes s the arena's most recent segment.
func (ar *arena) link(s *segment) {
	s.next = ar.segs
	if s.next != nil {
		s.next.prev = s
	}
	ar.segs = s
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
