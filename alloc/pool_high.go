package alloc

import "github.com/capalloc/capalloc/alloc/driver"

// A graph pool borrows its large segments whole where a wholly free one
// of about the request's size is cached (takeWholeSegment), else from the
// low end of a free block (pool.get, then extendLocked over what
// follows), and its small segments from the high end of a free block of
// a segment already in use (takeHigh): captures of growing size then find
// the room later ones need, while the graphs' small outputs pile up apart
// from it and never fence it.

// takeHigh takes n bytes (rounded) off the high end of the largest free
// block of the arena n's request goes to that is not a whole segment (a
// wholly free segment stays whole for takeWholeSegment), the rest of the
// block staying free at its low end; nil when there is none of n bytes.
// The block handed out is not free. It walks the arena's blocks: it is
// called only when a capture's graph pool borrows.
func (p *pool) takeHigh(n int64) *block {
	n = p.round(n)
	p.mergeRecent()
	ar := p.arenaFor(n)
	var b *block
	for s := range ar.segments() {
		for c := range s.blocks() {
			whole := c.segPrev == nil && c.segNext == nil
			if c.free && !whole && s.exp == nil && c.class >= n && (b == nil || c.class > b.class) {
				b = c
			}
		}
	}
	if b == nil {
		return nil
	}
	if b.class-n < ar.splitMin { // nothing worth keeping below: take it whole
		p.claim(ar, b, b.class)
		return b
	}
	ar.free.remove(b)
	r := p.record()
	r.ptr, r.class, r.kind, r.seg = b.ptr+driver.DevicePtr(b.class-n), n, kindPooled, b.seg
	r.segPrev, r.segNext = b, b.segNext
	if b.segNext != nil {
		b.segNext.segPrev = r
	}
	b.segNext = r
	b.class -= n
	p.cached -= n
	ar.free.insert(b)
	return r
}

// wholeSegmentSlack bounds the wholly free segment a graph pool takes
// whole for a large request: at most this many times the segment a miss
// of that request would make, so a small capture does not hold a large
// cached segment away from eager allocations.
const wholeSegmentSlack = 4

// takeWholeSegment takes, for a large request of n bytes, the smallest
// wholly free cached segment that holds it, when it is at most
// wholeSegmentSlack times segmentSize(n); nil otherwise (and for small
// requests). The block handed out is the whole segment, not free.
func (p *pool) takeWholeSegment(n int64) *block {
	n = p.round(n)
	if n <= smallRequest {
		return nil
	}
	var best *block
	for s := range p.large.segments() {
		b := s.first
		if s.exp == nil && b.free && b.segNext == nil && b.class >= n && b.class <= wholeSegmentSlack*segmentSize(n) && (best == nil || b.class < best.class) {
			best = b
		}
	}
	if best != nil {
		p.claim(&p.large, best, best.class)
	}
	return best
}
