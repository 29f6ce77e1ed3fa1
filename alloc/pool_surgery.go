package alloc

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

// Block surgery for the expandable ranges (expandable.go) and the graph
// pools' arenas (graphpool.go).

// last is the range's highest block, nil when it has none.
func (e *expandable) last() *block { return e.seg.last() }

// cut splits b at p, inside it, and returns the upper part: a block of
// the same kind, free flag off, linked after b. b must not be in a fit
// index.
func (p *pool) cut(b *block, at driver.DevicePtr) *block {
	r := p.record()
	r.ptr, r.class, r.kind, r.seg = at, b.class-int64(at-b.ptr), b.kind, b.seg
	r.segPrev, r.segNext = b, b.segNext
	if b.segNext != nil {
		b.segNext.segPrev = r
	}
	b.segNext = r
	b.class = int64(at - b.ptr)
	return r
}

// extend grows e's range to end (an offset, chunk-aligned) with a hole.
func (p *pool) extend(e *expandable, end int64) {
	last := e.last()
	grow := end - e.end
	e.end = end
	if last != nil && last.kind == kindHole {
		last.class += grow
		return
	}
	h := p.record()
	h.ptr, h.class, h.kind, h.seg = e.base+driver.DevicePtr(end-grow), grow, kindHole, e.seg
	h.segPrev = last
	if last != nil {
		last.segNext = h
	} else {
		e.seg.first = h
	}
}

// shrink gives back the addresses of a hole at the end of e's range, down
// to floor (an offset, chunk-aligned): a range being mapped is kept.
func (p *pool) shrink(e *expandable, floor int64) {
	last := e.last()
	if last == nil || last.kind != kindHole || e.end <= floor {
		return
	}
	if hl := e.off(last.ptr); hl < floor {
		last.class = floor - hl
		e.end = floor
		return
	}
	e.end -= last.class
	if q := last.segPrev; q != nil {
		q.segNext = nil
	} else {
		e.seg.first = nil
	}
	p.recycle(last)
}

// fill makes [lo, hi) of hole h, now mapped, a free block, merged with its
// free neighbours.
func (p *pool) fill(e *expandable, h *block, lo, hi driver.DevicePtr) {
	m := h
	if lo > h.ptr {
		m = p.cut(h, lo)
	}
	if hi < m.ptr+driver.DevicePtr(m.class) {
		p.cut(m, hi)
	}
	m.kind = kindPooled
	p.cached += m.class
	p.merge(m)
}

// punch makes [lo, hi) of free block f, about to be unmapped, a hole,
// merged with its neighbouring holes; the rest of f stays free.
func (p *pool) punch(e *expandable, f *block, lo, hi driver.DevicePtr) {
	ar := e.seg.ar
	ar.free.remove(f)
	f.free = false
	m := f
	if lo > f.ptr {
		m = p.cut(f, lo)
		p.putFree(ar, f)
	}
	if hi < m.ptr+driver.DevicePtr(m.class) {
		p.putFree(ar, p.cut(m, hi))
	}
	m.kind = kindHole
	p.cached -= m.class
	if n := m.segNext; n != nil && n.kind == kindHole {
		p.absorb(m, n)
	}
	if q := m.segPrev; q != nil && q.kind == kindHole {
		p.absorb(q, m)
	}
}

// carve takes n bytes at offset start out of b, the free block of e
// holding them, and returns them as a block, not free; the rest on either
// side stays free.
func (p *pool) carve(e *expandable, b *block, start, n int64) *block {
	ar := e.seg.ar
	ar.free.remove(b)
	b.free = false
	p.cached -= b.class
	if at := e.base + driver.DevicePtr(start); at > b.ptr {
		r := p.cut(b, at)
		p.cached += b.class
		p.putFree(ar, b)
		b = r
	}
	p.split(ar, b, n)
	return b
}

// appendFree adds n bytes at ptr, just past the end of s, to s as a free
// block, merged with a free block it follows: a graph pool's segment
// extended over memory it borrowed (GraphPool.extendLocked).
func (p *pool) appendFree(s *segment, ptr driver.DevicePtr, n int64) {
	last := s.last()
	r := p.record()
	r.ptr, r.class, r.kind, r.seg = ptr, n, kindPooled, s
	r.segPrev, last.segNext = last, r
	s.size += n
	p.cached += n
	p.merge(r)
}
