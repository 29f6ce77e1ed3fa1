package alloc

import "github.com/capalloc/capalloc/alloc/driver"

// Placement in an expandable range (expandable.go): where a miss maps
// and carves its block (place), and where a pool hit carves its block out
// of a free one (startIn). Both keep free memory in whole chunks, the
// only unit that can be unmapped.

// place chooses where a block of n bytes goes: the start, in a run of
// free blocks and holes (the last run may extend past the end), that
// needs the fewest bytes mapped, the lowest address among equals. fits is
// false when no run, the range's unused end included, has room.
func (e *expandable) place(n int64) (start, cost int64, fits bool) {
	best := int64(-1)
	consider := func(run *block, runEnd int64, s int64) {
		if s+n > runEnd || (run != nil && s < e.off(run.ptr)) || (run == nil && s < e.end) {
			return
		}
		c := e.unmappedIn(run, roundDown(s, e.chunk), roundUp(s+n, e.chunk))
		if best < 0 || c < cost || (c == cost && s < start) {
			best, start, cost = s, s, c
		}
	}
	// endRun considers every start in the run from run up to b (nil: the
	// range's end, where the run can grow into the unused range).
	endRun := func(run, b *block) {
		runEnd := e.reserved
		if b != nil {
			runEnd = e.off(b.ptr)
		}
		if run == nil { // b == nil: the range's unused end alone
			consider(nil, runEnd, e.end)
			return
		}
		for r := range blocksFrom(run) {
			if r == b {
				break
			}
			consider(run, runEnd, e.off(r.ptr))
		}
		consider(run, runEnd, runEnd-n)
	}
	var run *block // first block of the current run
	for b := range e.seg.blocks() {
		if b.free || b.kind == kindHole {
			if run == nil {
				run = b
			}
			continue
		}
		if run != nil {
			endRun(run, b)
			run = nil
		}
	}
	endRun(run, nil)
	return start, cost, best >= 0
}

// startIn is where in b, a free block of the range (all of it mapped),
// a pool hit of n bytes goes: among b's start and end and the places
// that begin or end on a chunk boundary, the one whose chunks are the
// fewest, so the block shares as few chunks as can be with its
// neighbours (a chunk goes back only when nothing in it is used: a
// long-lived block across two chunks keeps both mapped); then the one
// that takes the fewest of b's whole chunks, which the free rest keeps
// for the slack policy to unmap; then the lowest. A 2 MiB block then
// takes one chunk, not parts of two.
func (e *expandable) startIn(b *block, n int64) int64 {
	lo, hi := e.off(b.ptr), e.off(b.ptr)+b.class
	wLo, wHi := roundUp(lo, e.chunk), roundDown(hi, e.chunk) // b's whole chunks
	cost := func(x int64) (chunks, whole int64) {
		cLo, cHi := roundDown(x, e.chunk), roundUp(x+n, e.chunk)
		return cHi - cLo, max(0, min(cHi, wHi)-max(cLo, wLo))
	}
	best := lo
	bc, bw := cost(lo)
	for _, x := range [...]int64{wLo, roundUp(lo+n, e.chunk) - n, roundDown(hi-n, e.chunk), hi - n} {
		if x < lo || x+n > hi {
			continue
		}
		if c, w := cost(x); c < bc || (c == bc && (w < bw || (w == bw && x < best))) {
			best, bc, bw = x, c, w
		}
	}
	return best
}

// off is p's offset in the range.
func (e *expandable) off(p driver.DevicePtr) int64 { return int64(p - e.base) }

// unmappedIn is the bytes of [lo, hi) (offsets) not mapped: in holes from
// run on, or past the range's end.
func (e *expandable) unmappedIn(run *block, lo, hi int64) int64 {
	var c int64
	for b := range blocksFrom(run) {
		if e.off(b.ptr) >= hi {
			break
		}
		if b.kind == kindHole {
			bl := e.off(b.ptr)
			c += max(0, min(hi, bl+b.class)-max(lo, bl))
		}
	}
	if hi > e.end {
		c += hi - max(lo, e.end)
	}
	return c
}

// blockAt is the block holding offset c, nil past the end.
func (e *expandable) blockAt(c int64) *block {
	for b := range e.seg.blocks() {
		if bl := e.off(b.ptr); c >= bl && c < bl+b.class {
			return b
		}
	}
	return nil
}
