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
// Mapping and unmapping are unsafe, device-wide calls: made only with no
// capture on the stream and while the domain's guard allows an unsafe call
// now (the gate tried, never waited for, since a.mu is held). Otherwise a
// miss gets an ordinary stream-ordered segment (MallocAsync), which Trim
// and Close give back as before.
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
// two traces: 1.03x with none at 262 and 1,054 unmaps per 1e5 ops, 1.10x
// with 10% at 74 and 367; BENCHMARKS.md).
const expandSlack = 1.10

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

	frees  []*block // scratch for unmapFreeLocked, kept to allocate once
	mapped []int64  // scratch for mapLocked
}

func roundDown(x, unit int64) int64 { return x &^ (unit - 1) }
func roundUp(x, unit int64) int64   { return (x + unit - 1) &^ (unit - 1) }

// growExpandableLocked serves a pool miss of n bytes (rounded) from the
// arena's expandable range. ok false (with no error) means the range
// cannot serve it now: the guard forbids mapping, or the range is full;
// the caller makes an ordinary segment. Caller holds a.mu, in StateNone.
func (a *Allocator) growExpandableLocked(n int64) (b *block, ok bool, err error) {
	if !a.dom.gate.TryRLock() {
		return nil, false, nil // a capture begins or ends in the domain
	}
	defer a.dom.gate.RUnlock()
	if a.unsafeAllowedLocked(StateNone, false) != nil {
		return nil, false, nil // a Global-mode capture elsewhere in the domain
	}
	ar := a.pool.arenaFor(n)
	e := ar.exp
	if e == nil {
		if e, err = a.reserveLocked(ar); err != nil {
			return nil, true, err
		}
	}
	a.pool.mergeRecent() // placement must see every free byte merged
	start, cost, fits := e.place(n)
	if !fits {
		return nil, false, nil
	}
	keepLo, keepHi := roundDown(start, e.chunk), roundUp(start+n, e.chunk)
	if err := a.reclaimLocked(cost, e, keepLo, keepHi); err != nil {
		return nil, true, err
	}
	if err := a.mapLocked(e, keepLo, keepHi); err != nil {
		return nil, true, err
	}
	return a.pool.carve(e, start, n), true, nil
}

// reserveLocked reserves ar's range and makes it a segment of the arena.
func (a *Allocator) reserveLocked(ar *arena) (*expandable, error) {
	chunk := max(int64(expandChunk), a.vm.MapGranularity())
	size := roundUp(expandReserve*a.info.TotalMemory, chunk)
	base, err := a.vm.ReserveAddress(size)
	if err != nil {
		return nil, fmt.Errorf("reserving %d B of addresses for expandable segments: %w", size, err)
	}
	s := &segment{ptr: base, ar: ar}
	e := &expandable{seg: s, base: base, reserved: size, chunk: chunk}
	s.exp = e
	s.next = ar.segs
	if s.next != nil {
		s.next.prev = s
	}
	ar.segs = s
	ar.exp = e
	return e, nil
}

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
	var run *block // first block of the current run
	for b := e.seg.first; ; b = b.segNext {
		if b != nil && (b.free || b.kind == kindHole) {
			if run == nil {
				run = b
			}
			continue
		}
		if run != nil || b == nil { // a run ends here
			runEnd := e.reserved // the tail run can grow into the unused range
			if b != nil {
				runEnd = e.off(b.ptr)
			}
			if run == nil { // b == nil: the range's unused end alone
				consider(nil, runEnd, e.end)
			} else {
				for r := run; r != b; r = r.segNext {
					consider(run, runEnd, e.off(r.ptr))
				}
				consider(run, runEnd, runEnd-n)
			}
			run = nil
		}
		if b == nil {
			break
		}
	}
	return start, cost, best >= 0
}

// off is p's offset in the range.
func (e *expandable) off(p driver.DevicePtr) int64 { return int64(p - e.base) }

// unmappedIn is the bytes of [lo, hi) (offsets) not mapped: in holes from
// run on, or past the range's end.
func (e *expandable) unmappedIn(run *block, lo, hi int64) int64 {
	var c int64
	for b := run; b != nil && e.off(b.ptr) < hi; b = b.segNext {
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

// mapLocked maps every hole chunk in [lo, hi) (offsets, chunk-aligned),
// extending the range's end first if hi is past it; the chunks become free
// blocks. A chunk the driver cannot map for lack of memory is retried
// after giving memory back (giveBackLocked); if it still fails, what this
// call mapped is unmapped again and the error wraps ErrOutOfMemory.
// Blocks are found by address at each chunk: a give-back reshapes them.
func (a *Allocator) mapLocked(e *expandable, lo, hi int64) error {
	if hi > e.end {
		a.pool.extend(a, e, hi)
	}
	mapped := e.mapped[:0] // chunks this call mapped, to undo on failure
	defer func() { e.mapped = mapped[:0] }()
	for c := lo; c < hi; c += e.chunk {
		if b := e.blockAt(c); b.kind != kindHole {
			continue
		}
		if err := a.mapChunkLocked(e, c, lo, hi); err != nil {
			errs := []error{err}
			for _, m := range mapped {
				a.pool.punch(e, e.blockAt(m), e.base+driver.DevicePtr(m), e.base+driver.DevicePtr(m+e.chunk))
				errs = append(errs, a.unmapRangeLocked(e, m, m+e.chunk))
			}
			a.pool.shrink(e, 0)
			return errors.Join(errs...)
		}
		a.pool.fill(e, e.blockAt(c), e.base+driver.DevicePtr(c), e.base+driver.DevicePtr(c+e.chunk))
		mapped = append(mapped, c)
	}
	return nil
}

// mapChunkLocked maps the chunk at offset c. Out of memory, it gives back
// what it can outside [keepLo, keepHi) and retries once.
func (a *Allocator) mapChunkLocked(e *expandable, c, keepLo, keepHi int64) error {
	err := a.vm.MapMemory(e.base+driver.DevicePtr(c), e.chunk)
	if errors.Is(err, ErrOutOfMemory) {
		gave, gerr := a.giveBackLocked("Alloc", e, keepLo, keepHi)
		if gerr != nil {
			return errors.Join(err, gerr)
		}
		if gave {
			err = a.vm.MapMemory(e.base+driver.DevicePtr(c), e.chunk)
		}
	}
	if err != nil {
		return err
	}
	a.stats.DriverAllocs++
	a.stats.addReserved(e.chunk)
	e.seg.size += e.chunk
	return nil
}

// giveBackLocked makes room for a mapping that ran out of memory: the
// stream is waited for, every whole free chunk outside [keepLo, keepHi) of
// keep's range (and all of the other arena's) is unmapped, the pool's
// ordinary free segments go back to the driver, and graph memory is
// trimmed when the driver can. It reports whether anything was given back.
// Caller holds a.mu and the gate's shared side.
func (a *Allocator) giveBackLocked(op string, keep *expandable, keepLo, keepHi int64) (bool, error) {
	if err := a.drainLocked(op); err != nil {
		return false, err
	}
	n, err := a.unmapFreeLocked(-1, keep, keepLo, keepHi)
	if err != nil {
		return n > 0, err
	}
	freed, err := a.releaseCacheLocked()
	if err != nil {
		return true, err
	}
	if freed {
		// The ordinary segments' frees are stream-ordered: let them run.
		if err := a.drainLocked(op); err != nil {
			return true, err
		}
	}
	return n > 0 || freed || a.tryTrimGraphMemoryLocked(), nil
}

// reclaimLocked is the unmapping policy: before a miss maps need bytes
// that would take the reserved bytes past expandSlack times the peak in
// use, unmap as many bytes of whole free chunks outside [keepLo, keepHi)
// of keep's range (the other arena's too) as the excess, at most need, so
// the memory mapped grows past the slack only when the free chunks are
// used up. Done only when the stream is idle, asked without waiting:
// unmapping is not stream-ordered, and work queued before a free may still
// use the memory. An error of earlier work that the idle check reports
// (and clears) is returned: the caller's operation reports it, as the next
// synchronize would have.
func (a *Allocator) reclaimLocked(need int64, keep *expandable, keepLo, keepHi int64) error {
	over := a.stats.BytesReserved + need - int64(expandSlack*float64(a.inUse.peak.Load()))
	if over <= 0 || a.idler == nil || a.pool.cached < keep.chunk {
		return nil
	}
	need = min(need, roundUp(over, keep.chunk))
	idle, err := a.idler.StreamIdle(a.stream)
	if err != nil {
		return fmt.Errorf("earlier work on the stream failed: %w", err)
	}
	if !idle {
		return nil
	}
	_, err = a.unmapFreeLocked(need, keep, keepLo, keepHi)
	return err
}

// drainLocked waits until the stream has run everything queued, so no
// work uses memory about to be unmapped: asked without waiting first,
// then synchronized under the watchdog. Caller holds a.mu and the gate's
// shared side, with no capture on the stream (host functions must not
// call the allocator, so nothing queued waits for a.mu).
func (a *Allocator) drainLocked(op string) error {
	if a.idler != nil {
		if idle, err := a.idler.StreamIdle(a.stream); err != nil || idle {
			return err
		}
	}
	_, err := a.watchdog.run(op, a.watchdog.timeout, func() error { return a.drv.StreamSynchronize(a.stream) }, nil)
	return err
}

// unmapFreeLocked unmaps whole chunks inside free blocks of both arenas'
// ranges, keep's first, highest addresses first, outside [keepLo, keepHi)
// of keep: up to limit bytes (< 0: all), and returns the bytes unmapped.
// Free chunks at the end of a range shrink it. The caller made sure no
// queued work uses them. Caller holds a.mu and the gate's shared side.
func (a *Allocator) unmapFreeLocked(limit int64, keep *expandable, keepLo, keepHi int64) (int64, error) {
	a.pool.mergeRecent()
	var done int64
	order := [2]*expandable{keep, a.pool.small.exp}
	if keep == a.pool.small.exp {
		order[1] = a.pool.large.exp
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
		for b := e.seg.first; b != nil; b = b.segNext {
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
			a.pool.punch(e, f, e.base+driver.DevicePtr(fl), e.base+driver.DevicePtr(fh))
			err := a.unmapRangeLocked(e, fl, fh)
			done += fh - fl
			if err != nil {
				return done, err
			}
		}
		a.pool.shrink(e, hi)
	}
	return done, nil
}

// unmapRangeLocked unmaps the chunks of [lo, hi) (offsets), which the pool
// has made a hole already, counting each as given back. A chunk the driver
// fails to unmap is counted gone too: it is the driver's now.
func (a *Allocator) unmapRangeLocked(e *expandable, lo, hi int64) error {
	var errs []error
	for c := lo; c < hi; c += e.chunk {
		if err := a.vm.UnmapMemory(e.base+driver.DevicePtr(c), e.chunk); err != nil {
			errs = append(errs, err)
		}
		a.givenBackLocked(e.chunk)
		e.seg.size -= e.chunk
	}
	return errors.Join(errs...)
}

// detachExpandableLocked takes both ranges out of the pool for Close: it
// counts their mapped chunks as given back and returns the calls that
// unmap them and release the reservations, for Close's unsafe cleanup to
// make after the stream's last synchronize. Caller holds a.mu.
func (a *Allocator) detachExpandableLocked() func() error {
	type mapping struct {
		p    driver.DevicePtr
		size int64
	}
	var chunks, ranges []mapping
	for _, ar := range [...]*arena{&a.pool.small, &a.pool.large} {
		e := ar.exp
		if e == nil {
			continue
		}
		a.pool.mergeRecent()
		for b := e.seg.first; b != nil; b = b.segNext {
			if b.kind == kindHole {
				continue
			}
			if b.free {
				ar.free.remove(b)
				a.pool.cached -= b.class
			}
		}
		next := int64(0) // the first chunk not listed yet
		for b := e.seg.first; b != nil; b = b.segNext {
			if b.kind == kindHole {
				continue
			}
			bl := e.off(b.ptr)
			for c := max(next, roundDown(bl, e.chunk)); c < bl+b.class; c += e.chunk {
				chunks = append(chunks, mapping{e.base + driver.DevicePtr(c), e.chunk})
				a.givenBackLocked(e.chunk)
				next = c + e.chunk
			}
		}
		ranges = append(ranges, mapping{e.base, e.reserved})
		ar.unlink(e.seg)
		ar.exp = nil
	}
	if len(ranges) == 0 {
		return nil
	}
	vm := a.vm
	return func() error {
		var errs []error
		for _, m := range chunks {
			errs = append(errs, vm.UnmapMemory(m.p, m.size))
		}
		for _, m := range ranges {
			errs = append(errs, vm.ReleaseAddress(m.p, m.size))
		}
		return errors.Join(errs...)
	}
}

// blockAt is the block holding offset c, nil past the end.
func (e *expandable) blockAt(c int64) *block {
	for b := e.seg.first; b != nil; b = b.segNext {
		if bl := e.off(b.ptr); c >= bl && c < bl+b.class {
			return b
		}
	}
	return nil
}

// Block surgery for the ranges (the pool's side).

// cut splits b at p, inside it, and returns the upper part: a block of
// the same kind, free flag off, linked after b. b must not be in a fit
// index.
func (p *pool) cut(b *block, at driver.DevicePtr) *block {
	r := p.record(b.a)
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
func (p *pool) extend(a *Allocator, e *expandable, end int64) {
	var last *block
	for b := e.seg.first; b != nil; b = b.segNext {
		last = b
	}
	grow := end - e.end
	e.end = end
	if last != nil && last.kind == kindHole {
		last.class += grow
		return
	}
	h := p.record(a)
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
	var last *block
	for b := e.seg.first; b != nil; b = b.segNext {
		last = b
	}
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

// carve takes n bytes at offset start out of the free block holding them
// (mapLocked made it so) and returns them as a block, not free; the rest
// on either side stays free.
func (p *pool) carve(e *expandable, start, n int64) *block {
	ar := e.seg.ar
	b := e.blockAt(start)
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

// unmapAllFreeLocked is Trim's part, and AllocSync's out-of-memory one:
// it waits for the stream, then unmaps every whole free chunk of both
// ranges, and reports whether there was any. Caller holds
// a.mu and the gate's shared side, the guard allowing unsafe calls.
func (a *Allocator) unmapAllFreeLocked(op string) (bool, error) {
	if a.pool.small.exp == nil && a.pool.large.exp == nil {
		return false, nil
	}
	if err := a.drainLocked(op); err != nil {
		return false, err
	}
	keep := a.pool.large.exp
	if keep == nil {
		keep = a.pool.small.exp
	}
	n, err := a.unmapFreeLocked(-1, keep, 0, 0)
	return n > 0, err
}
