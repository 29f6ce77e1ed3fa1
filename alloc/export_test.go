package alloc

import (
	"fmt"
	"github.com/capalloc/capalloc/alloc/driver"
)

// CheckPool verifies the pool's invariants (for alloc_test): every
// segment's blocks are contiguous and in address order, free blocks are
// merged and in their arena's index, the bytes cached add up, and an
// expandable range's holes are whole chunks, merged, with seg.size the
// bytes outside them.
func (a *Allocator) CheckPool() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := &a.pool
	var cached int64
	for i := 0; i < p.nRecent; i++ {
		cached += p.recent[i].class
	}
	for _, ar := range [...]*arena{&p.small, &p.large} {
		indexed := map[*block]bool{}
		for _, h := range ar.free.heads {
			for b := h; b != nil; b = b.freeNext {
				indexed[b] = true
			}
		}
		nfree := 0
		for s := ar.segs; s != nil; s = s.next {
			at := s.ptr
			var holes, mapped int64
			var prev *block
			for b := s.first; b != nil; b = b.segNext {
				if b.ptr != at || b.segPrev != prev || b.seg != s || b.class <= 0 {
					return fmt.Errorf("segment %#x: block %#x+%d out of order (expected at %#x)", s.ptr, b.ptr, b.class, at)
				}
				if b.free {
					nfree++
					cached += b.class
					if !indexed[b] {
						return fmt.Errorf("free block %#x not in the index", b.ptr)
					}
					if prev != nil && prev.free {
						return fmt.Errorf("free blocks %#x and %#x not merged", prev.ptr, b.ptr)
					}
				}
				if b.kind == kindHole {
					if s.exp == nil {
						return fmt.Errorf("hole %#x in an ordinary segment", b.ptr)
					}
					if (b.ptr-s.ptr)%driver.DevicePtr(s.exp.chunk) != 0 || b.class%s.exp.chunk != 0 {
						return fmt.Errorf("hole %#x+%d not whole chunks", b.ptr, b.class)
					}
					if prev != nil && prev.kind == kindHole {
						return fmt.Errorf("holes %#x and %#x not merged", prev.ptr, b.ptr)
					}
					if b.free || b.live() {
						return fmt.Errorf("hole %#x free or live", b.ptr)
					}
					holes += b.class
				} else {
					mapped += b.class
				}
				at += driver.DevicePtr(b.class)
				prev = b
			}
			if e := s.exp; e != nil {
				if int64(at-s.ptr) != e.end {
					return fmt.Errorf("range %#x: blocks end at %d, end %d", s.ptr, at-s.ptr, e.end)
				}
				if chunks := roundUp(e.end, e.chunk) - holes; s.size != chunks || s.size < mapped {
					return fmt.Errorf("range %#x: size %d, %d B outside holes, %d B in blocks", s.ptr, s.size, chunks, mapped)
				}
			} else if int64(at-s.ptr) != s.size {
				return fmt.Errorf("segment %#x: blocks cover %d of %d B", s.ptr, at-s.ptr, s.size)
			}
		}
		if nfree != len(indexed) {
			return fmt.Errorf("%d free blocks, %d indexed", nfree, len(indexed))
		}
	}
	if cached != p.cached {
		return fmt.Errorf("cached %d, blocks add up to %d", p.cached, cached)
	}
	return nil
}
