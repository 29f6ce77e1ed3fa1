package alloc

import "iter"

// The walks over the pool: every loop over segments or blocks (the pool's,
// the expandable ranges', Snapshot's, Close's) ranges over these.

// arenas are the pool's two arenas, small first.
func (p *pool) arenas() [2]*arena { return [2]*arena{&p.small, &p.large} }

// segments yields every segment of both arenas, the small arena's first,
// each arena's most recent first. The loop body may not unlink segments.
func (p *pool) segments() iter.Seq[*segment] {
	return func(yield func(*segment) bool) {
		for _, ar := range p.arenas() {
			for s := range ar.segments() {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// segments yields the arena's segments, most recent first. The loop body
// may not unlink segments.
func (ar *arena) segments() iter.Seq[*segment] {
	return func(yield func(*segment) bool) {
		for s := ar.segs; s != nil; s = s.next {
			if !yield(s) {
				return
			}
		}
	}
}

// blocks yields s's blocks in address order, holes included.
func (s *segment) blocks() iter.Seq[*block] { return blocksFrom(s.first) }

// last is s's highest block, nil when it has none.
func (s *segment) last() *block {
	var last *block
	for b := range s.blocks() {
		last = b
	}
	return last
}

// blocksFrom yields b and the blocks after it in its segment, in address
// order. The loop body may change the block it is at, not its successor.
func blocksFrom(b *block) iter.Seq[*block] {
	return func(yield func(*block) bool) {
		for ; b != nil; b = b.segNext {
			if !yield(b) {
				return
			}
		}
	}
}
