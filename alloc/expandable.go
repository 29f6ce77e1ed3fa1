package alloc

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Expandable segments (Options.ExpandableSegments; docs/allocator-core.md,
// "Expandable segments"). Each arena of the pool grows one reserved range
// of device addresses (VirtualMemory) instead of separate driver
// allocations: physical chunks are mapped where blocks need them, so free
// memory merges across what would have been segment boundaries, and the
// whole chunks inside free blocks can be unmapped without the segment
// being wholly free.
//
// The range is one segment of the arena. Its blocks cover [base, base+end)
// in address order: live, held and free blocks as in any segment, all
// mapped, and holes (kindHole): runs of whole chunks with nothing
// mapped behind them, never in the fit index. So a pool hit stays what it
// was (a free block is always mapped), and only a miss maps: it picks the
// run of free blocks and holes that needs the fewest chunks mapped
// (extending the range at its end if that is cheaper), maps them and
// carves the request there.
//
// Mapping and unmapping are unsafe, device-wide calls: the Allocator asks
// the pool to map only with no capture on the stream and while the
// domain's guard allows an unsafe call now (the gate tried, never waited
// for, since a.mu is held). Otherwise a miss gets an ordinary
// stream-ordered segment (MallocAsync), which Trim and Close give back as
// before.
//
// Unmapping (the policy that keeps reserved memory near the memory in
// use): when a miss would take what is mapped past expandSlack times the
// peak in use, whole free chunks elsewhere are unmapped first, so what is
// mapped grows past that only when the free chunks are used up. Memory
// freed on the stream may still be used by work queued before the free,
// and unmapping is not stream-ordered, so this is done only when the
// stream is idle (asked without waiting); Trim, Close and the
// out-of-memory path wait for the stream instead.

// expandChunk is the smallest chunk mapped at a time: a device's map
// granularity, if larger, wins. 2 MiB is CUDA's usual granularity, so
// figures measured on cpu (4 KiB pages) hold for a GPU too.
const expandChunk = 2 << 20

// expandSlack is how far past the peak in use the reserved bytes may grow
// before a miss unmaps free chunks to make room instead of mapping more:
// a cache of free chunks that saves map and unmap calls (measured on the
// project and inference traces: 1.03x with none at 262 and 1,054 unmaps
// per 1e5 ops, 1.10x with 10% at 74 and 367; 4% keeps both at 1.04x,
// under the 1.05x target; BENCHMARKS.md, "Fragmentation against PyTorch").
const expandSlack = 1.04

// expandReserve is how much address space each arena reserves, in device
// memories: fragmented free space in the range costs addresses, not
// memory, so the range is larger than the device.
const expandReserve = 2

// expandable is one arena's reserved range.
type expandable struct {
	seg      *segment // the range's blocks; seg.size counts the bytes mapped
	base     driver.DevicePtr
	reserved int64
	end      int64 // bytes of the range its blocks cover
	chunk    int64

	frees  []*block // scratch for unmapFree, kept to allocate once
	mapped []int64  // scratch for mapRange
}

func roundDown(x, unit int64) int64 { return x &^ (unit - 1) }
func roundUp(x, unit int64) int64   { return (x + unit - 1) &^ (unit - 1) }

// growExpandable serves a miss of size bytes from its arena's expandable
// range. ok false (with no error) means the range cannot serve
// it (it is full): the caller makes an ordinary segment. The caller has
// made sure the guard allows mapping now; headroom is how many bytes more
// may be mapped before the slack policy unmaps free chunks first
// (unmapOverSlack).
func (p *pool) growExpandable(size, headroom int64) (b *block, ok bool, err error) {
	n := p.round(size)
	ar := p.arenaFor(n)
	e := ar.exp
	if e == nil {
		if e, err = p.reserve(ar); err != nil {
			return nil, true, err
		}
	}
	p.mergeRecent() // placement must see every free byte merged
	start, cost, fits := e.place(n)
	if !fits {
		return nil, false, nil
	}
	keepLo, keepHi := roundDown(start, e.chunk), roundUp(start+n, e.chunk)
	if err := p.unmapOverSlack(cost, headroom, e, keepLo, keepHi); err != nil {
		return nil, true, err
	}
	if err := p.mapRange(e, keepLo, keepHi); err != nil {
		return nil, true, err
	}
	return p.carve(e, e.blockAt(start), start, n), true, nil
}

// reserve reserves ar's range and makes it a segment of the arena. From
// then on the arena splits off every remainder (splitMin is the granule):
// a block does not keep a tail of up to 1 MiB past its request, which
// would stay mapped as long as the block lives, and a free tail merges
// with its free neighbours, so whole chunks of free memory form sooner.
func (p *pool) reserve(ar *arena) (*expandable, error) {
	chunk := max(int64(expandChunk), p.up.mapGranularity(), p.granule) // powers of two: a multiple of each
	size := roundUp(expandReserve*p.device, chunk)
	base, err := p.up.reserve(size)
	if err != nil {
		return nil, fmt.Errorf("reserving %d B of addresses for expandable segments: %w", size, err)
	}
	s := &segment{ptr: base, ar: ar}
	e := &expandable{seg: s, base: base, reserved: size, chunk: chunk}
	s.exp = e
	ar.link(s)
	ar.exp = e
	ar.splitMin = p.granule
	return e, nil
}

// mapRange maps every hole chunk in [lo, hi) (offsets, chunk-aligned),
// extending the range's end first if hi is past it; the chunks become free
// blocks. A chunk the driver cannot map for lack of memory climbs the
// reclaim ladder; if it still fails, what this call mapped is unmapped
// again and the error wraps ErrOutOfMemory. Blocks are found by address
// at each chunk: a give-back reshapes them.
func (p *pool) mapRange(e *expandable, lo, hi int64) error {
	if hi > e.end {
		p.extend(e, hi)
	}
	mapped := e.mapped[:0] // chunks this call mapped, to undo on failure
	defer func() { e.mapped = mapped[:0] }()
	for c := lo; c < hi; c += e.chunk {
		if b := e.blockAt(c); b.kind != kindHole {
			continue
		}
		if err := p.mapChunk(e, c, lo, hi); err != nil {
			errs := []error{err}
			for _, m := range mapped {
				p.punch(e, e.blockAt(m), e.base+driver.DevicePtr(m), e.base+driver.DevicePtr(m+e.chunk))
				errs = append(errs, p.unmapRange(e, m, m+e.chunk))
			}
			p.shrink(e, 0)
			return errors.Join(errs...)
		}
		p.fill(e, e.blockAt(c), e.base+driver.DevicePtr(c), e.base+driver.DevicePtr(c+e.chunk))
		mapped = append(mapped, c)
	}
	return nil
}

// mapChunk maps the chunk at offset c of [keepLo, keepHi), the range
// being mapped. Out of memory, it climbs the reclaim ladder
// (pathMapChunk), keeping that range, for what is left of it to map.
func (p *pool) mapChunk(e *expandable, c, keepLo, keepHi int64) error {
	try := func() error { return p.up.mapMemory(e.base+driver.DevicePtr(c), e.chunk) }
	if err := try(); err != nil {
		r := reclaim{p: p, path: pathMapChunk, op: "Alloc", need: keepHi - c, unmap: true,
			keep: e, keepLo: keepLo, keepHi: keepHi}
		if err = r.climb(err, try); err != nil {
			return err
		}
	}
	e.seg.size += e.chunk
	return nil
}

// unmapOverSlack is the unmapping policy: before a miss maps need bytes
// that would take the bytes mapped past headroom (expandSlack times the
// peak in use, less what is reserved), unmap as many bytes of whole free
// chunks outside [keepLo, keepHi) of keep's range (the other arena's too)
// as the excess, at most need, so the memory mapped grows past the slack
// only when the free chunks are used up. It bounds a cache, it is no
// out-of-memory path: done only when the stream is idle, asked without
// waiting (unmapping is not stream-ordered, and work queued before a free
// may still use the memory). An error of earlier work that the idle check
// reports (and clears) is returned: the caller's operation reports it, as
// the next synchronize would have.
func (p *pool) unmapOverSlack(need, headroom int64, keep *expandable, keepLo, keepHi int64) error {
	over := need - headroom
	if over <= 0 || p.cached < keep.chunk {
		return nil
	}
	need = min(need, roundUp(over, keep.chunk))
	idle, err := p.up.idle()
	if err != nil {
		return fmt.Errorf("earlier work on the stream failed: %w", err)
	}
	if !idle {
		return nil
	}
	_, err = p.unmapFree(need, keep, keepLo, keepHi)
	return err
}

// unmapFree unmaps whole chunks inside free blocks of both arenas'
// ranges, keep's first, highest addresses first, outside [keepLo, keepHi)
// of keep: up to limit bytes (< 0: all), and returns the bytes unmapped.
// Free chunks at the end of a range shrink it. The caller made sure no
// queued work uses them.
func (p *pool) unmapFree(limit int64, keep *expandable, keepLo, keepHi int64) (int64, error) {
	p.mergeRecent()
	var done int64
	order := [2]*expandable{keep, p.small.exp}
	if keep == p.small.exp {
		order[1] = p.large.exp
	}
	for _, e := range order {
		if e == nil {
			continue
		}
		lo, hi := keepLo, keepHi
		if e != keep {
			lo, hi = 0, 0
		}
		frees := e.frees[:0]
		for b := range e.seg.blocks() {
			if b.free {
				frees = append(frees, b)
			}
		}
		e.frees = frees[:0]
		for i := len(frees) - 1; i >= 0 && (limit < 0 || done < limit); i-- {
			f := frees[i]
			fl, fh := roundUp(e.off(f.ptr), e.chunk), roundDown(e.off(f.ptr)+f.class, e.chunk)
			// Leave out the kept range: the free chunks above it, else below.
			if fl < hi && lo < fh {
				if fh > hi {
					fl = hi
				} else {
					fh = lo
				}
			}
			if limit >= 0 {
				fl = max(fl, fh-(limit-done))
			}
			if fl >= fh {
				continue
			}
			p.punch(e, f, e.base+driver.DevicePtr(fl), e.base+driver.DevicePtr(fh))
			err := p.unmapRange(e, fl, fh)
			done += fh - fl
			if err != nil {
				return done, err
			}
		}
		p.shrink(e, hi)
	}
	return done, nil
}

// unmapRange unmaps the chunks of [lo, hi) (offsets), which the pool has
// made a hole already. A chunk the driver fails to unmap is gone too: it
// is the driver's now.
func (p *pool) unmapRange(e *expandable, lo, hi int64) error {
	var errs []error
	for c := lo; c < hi; c += e.chunk {
		errs = append(errs, p.up.unmapMemory(e.base+driver.DevicePtr(c), e.chunk))
		e.seg.size -= e.chunk
	}
	return errors.Join(errs...)
}

// span is a run of device memory: a mapped chunk or a reservation.
type span struct {
	p    driver.DevicePtr
	size int64
}

// detach takes both ranges out of the pool (for Close) and returns their
// mapped chunks and their reservations, for the caller to unmap and
// release.
func (p *pool) detach() (chunks, ranges []span) {
	for _, ar := range p.arenas() {
		e := ar.exp
		if e == nil {
			continue
		}
		p.mergeRecent()
		for b := range e.seg.blocks() {
			if b.kind != kindHole && b.free {
				ar.free.remove(b)
				p.cached -= b.class
			}
		}
		next := int64(0) // the first chunk not listed yet
		for b := range e.seg.blocks() {
			if b.kind == kindHole {
				continue
			}
			bl := e.off(b.ptr)
			for c := max(next, roundDown(bl, e.chunk)); c < bl+b.class; c += e.chunk {
				chunks = append(chunks, span{e.base + driver.DevicePtr(c), e.chunk})
				next = c + e.chunk
			}
		}
		ranges = append(ranges, span{e.base, e.reserved})
		ar.unlink(e.seg)
		ar.exp = nil
	}
	return chunks, ranges
}
