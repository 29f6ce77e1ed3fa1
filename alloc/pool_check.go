package alloc

import (
	"fmt"
	"github.com/capalloc/capalloc/alloc/driver"
)

// check verifies the pool's invariants, for the tests that run it after
// every step of a trace: each segment's blocks tile it in address order
// with no gap or overlap; each arena's free index holds exactly its free
// blocks, merged, each in its size's bucket; the recent blocks are whole,
// neither free nor indexed, and marked cached (as the lane's shards' are;
// a free block is not); the bytes cached add up; none of those blocks
// reads as live; and an expandable
// range's holes are whole chunks, merged, with seg.size the bytes mapped
// outside them. The caller serializes it with the pool's other calls.
func (p *pool) check() error {
	recent := map[*block]bool{}
	cached := int64(0)
	for _, b := range p.recent[:p.nRecent] {
		if b == nil || b.free || !b.cached || b.kind != kindPooled || b.seg == nil || b.live() {
			return fmt.Errorf("recent block %p: free, not marked cached, unpooled, outside a segment or live", b)
		}
		recent[b] = true
		cached += b.class
	}
	for _, ar := range p.arenas() {
		indexed := map[*block]bool{}
		for i, h := range ar.free.heads {
			var prev *block
			for b := h; b != nil; b = b.freeNext {
				if b.freePrev != prev || int(b.bucket) != i || bucketOf(b.class) != i {
					return fmt.Errorf("free index: block %#x+%d misfiled (bucket %d, list %d)", b.ptr, b.class, b.bucket, i)
				}
				if !b.free || b.seg == nil || b.seg.ar != ar {
					return fmt.Errorf("free index: block %#x+%d not a free block of the arena", b.ptr, b.class)
				}
				indexed[b] = true
				prev = b
			}
			if nonEmpty := ar.free.nonEmpty[i>>6]&(1<<(i&63)) != 0; nonEmpty != (h != nil) {
				return fmt.Errorf("free index: bucket %d's bit is %v, its list empty: %v", i, nonEmpty, h == nil)
			}
		}
		nfree, sawExp := 0, false
		var prevSeg *segment
		for s := range ar.segments() {
			if s.prev != prevSeg || s.ar != ar {
				return fmt.Errorf("segment %#x: badly linked", s.ptr)
			}
			prevSeg = s
			if s.exp != nil {
				if ar.exp != s.exp || s.exp.seg != s || sawExp {
					return fmt.Errorf("range %#x: not the arena's one range", s.ptr)
				}
				sawExp = true
			}
			n, c, err := checkSegment(s, indexed, recent)
			if err != nil {
				return err
			}
			nfree += n
			cached += c
		}
		if ar.exp != nil && !sawExp {
			return fmt.Errorf("range %#x: not in its arena's segments", ar.exp.base)
		}
		if nfree != len(indexed) {
			return fmt.Errorf("%d free blocks, %d indexed", nfree, len(indexed))
		}
	}
	for b := range recent {
		return fmt.Errorf("recent block %#x not in its segment", b.ptr)
	}
	if cached != p.cached {
		return fmt.Errorf("cached %d, blocks add up to %d", p.cached, cached)
	}
	return nil
}

// checkSegment checks that s's blocks tile it, and returns its free blocks
// and the bytes cached in them and in recent ones.
func checkSegment(s *segment, indexed, recent map[*block]bool) (nfree int, cached int64, err error) {
	at := s.ptr
	var holes, mapped int64
	var prev *block
	for b := range s.blocks() {
		if b.ptr != at || b.segPrev != prev || b.seg != s || b.class <= 0 {
			return 0, 0, fmt.Errorf("segment %#x: block %#x+%d out of order (expected at %#x)", s.ptr, b.ptr, b.class, at)
		}
		switch {
		case b.free:
			if b.cached || b.live() {
				return 0, 0, fmt.Errorf("free block %#x marked cached or reads as live", b.ptr)
			}
			nfree++
			cached += b.class
			if !indexed[b] {
				return 0, 0, fmt.Errorf("free block %#x not in the index", b.ptr)
			}
			if prev != nil && prev.free {
				return 0, 0, fmt.Errorf("free blocks %#x and %#x not merged", prev.ptr, b.ptr)
			}
		case indexed[b]:
			return 0, 0, fmt.Errorf("block %#x indexed but not free", b.ptr)
		}
		delete(recent, b) // found where it belongs
		if b.kind == kindHole {
			e := s.exp
			if e == nil {
				return 0, 0, fmt.Errorf("hole %#x in an ordinary segment", b.ptr)
			}
			if (b.ptr-s.ptr)%driver.DevicePtr(e.chunk) != 0 || b.class%e.chunk != 0 {
				return 0, 0, fmt.Errorf("hole %#x+%d not whole chunks", b.ptr, b.class)
			}
			if prev != nil && prev.kind == kindHole {
				return 0, 0, fmt.Errorf("holes %#x and %#x not merged", prev.ptr, b.ptr)
			}
			if b.free || b.live() {
				return 0, 0, fmt.Errorf("hole %#x free or live", b.ptr)
			}
			holes += b.class
		} else {
			mapped += b.class
		}
		at += driver.DevicePtr(b.class)
		prev = b
	}
	if e := s.exp; e != nil {
		if int64(at-s.ptr) != e.end || e.end > e.reserved {
			return 0, 0, fmt.Errorf("range %#x: blocks end at %d, end %d of %d reserved", s.ptr, at-s.ptr, e.end, e.reserved)
		}
		if chunks := roundUp(e.end, e.chunk) - holes; s.size != chunks || s.size < mapped {
			return 0, 0, fmt.Errorf("range %#x: size %d, %d B outside holes, %d B in blocks", s.ptr, s.size, chunks, mapped)
		}
	} else if int64(at-s.ptr) != s.size {
		return 0, 0, fmt.Errorf("segment %#x: blocks cover %d of %d B", s.ptr, at-s.ptr, s.size)
	}
	return nfree, cached, nil
}
