package alloc

import (
	"errors"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Alloc returns a buffer of size bytes, capture-aware: outside capture it
// comes from the pool (no driver call on a hit); inside a capture this
// allocator started it becomes a stream-ordered allocation node whose memory
// belongs to the graph until Graph.Close. During a capture the allocator did
// not start it fails with ErrCaptureIncompatibleAllocation, making no driver
// call.
func (a *Allocator) Alloc(size int64) (Buffer, error) {
	if size <= 0 {
		return Buffer{}, a.fail("Alloc", size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	if s := a.lane.cached(size); s != nil {
		if b, ok := a.lane.alloc(s, size); ok {
			return b, nil
		}
	}
	b, err := allocSlow(a, size)
	if err != nil && a.opts.OnOutOfMemory != nil {
		return afterOutOfMemory(a, "Alloc", size, err, func() (Buffer, error) { return a.Alloc(size) })
	}
	return b, err
}

// allocSlow is Alloc's path through a.mu: a miss of the lane's.
func allocSlow(a *Allocator, size int64) (Buffer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, mayGrow, err := a.guard.allocStateLocked()
	if err != nil {
		return Buffer{}, a.fail("Alloc", size, st, err)
	}
	if why := neverFits(a, size); why != "" {
		return Buffer{}, a.fail("Alloc", size, st, outOfMemory(a, size, why, nil))
	}
	if st == StateNone && a.eager == nil && profileRate.Load() == 0 {
		// The common case apart, with no Buffer kept for an eager run or a
		// sample: a smaller frame, measured faster (BenchmarkPoolTrace).
		b, err := a.poolAllocLocked(size, mayGrow)
		if err != nil {
			return Buffer{}, a.fail("Alloc", size, st, err)
		}
		return b, nil
	}
	var b Buffer
	switch st {
	case StateNone:
		if b, err = a.poolAllocLocked(size, mayGrow); err == nil && a.eager != nil {
			a.eager.bufs = append(a.eager.bufs, b) // an eager graph's run owns it
		}
	case StateActive:
		b, err = a.guard.cap.allocInLocked(a, size)
	default:
		err = refusal(st, "allocation")
	}
	if err != nil {
		return Buffer{}, a.fail("Alloc", size, st, err)
	}
	if profileRate.Load() != 0 {
		a.prof.sample(b.blk, nil, size)
	}
	return b, nil
}

// poolAllocLocked serves an allocation outside capture from the pool
// (takeLocked, pool.go) and hands the block out. mayGrow is the guard's
// verdict on growth read with the capture state (allocStateLocked).
func (a *Allocator) poolAllocLocked(size int64, mayGrow bool) (Buffer, error) {
	b, owed, err := takeLocked(a, size, mayGrow)
	if err != nil {
		return Buffer{}, err
	}
	return a.handOutLocked(b, size, owed), nil
}

// neverFits says why a request of n bytes cannot be served whatever is
// given back (larger than the device, or than the memory limit, limit.go),
// or "".
func neverFits(a *Allocator, n int64) string {
	if n > a.info.TotalMemory {
		return "the request is larger than the whole device"
	}
	if l := &a.stats.limit; l.max != 0 && n > l.max {
		return "the request is larger than the memory limit (" + l.key + ")"
	}
	return ""
}

// Trim gives the pool's cached memory back to the driver and, when the
// driver implements GraphMemTrimmer, the memory that closed graphs left
// cached (cudaDeviceGraphMemTrim). It is refused during a capture on the
// allocator's stream. The graph trim is device-wide: while a Global-mode
// capture is active elsewhere in the domain it is skipped (the pool's
// cache is still released) and a warning is logged. The pool's part is
// the reclaim ladder's top rung (pool.releaseAll); the graph trim is made
// after a.mu is released, a blocking call under the watchdog, as is the
// unpinning of the host cache's idle chunks (trimHostLocked).
func (a *Allocator) Trim() error {
	t, trims := a.drv.(driver.GraphMemTrimmer)
	var why error // why the graph trim and the unmapping are skipped
	var host [][]byte
	return a.guard.blocking("Trim", -1, func(st CaptureState) error {
		if st != StateNone {
			return a.guard.unsafeRefusalLocked(st, true, "trim frees memory")
		}
		if trims || a.vm != nil {
			why = a.guard.unsafeAllowedLocked(st, false)
		}
		host = trimHostLocked(a, st)
		_, err := a.pool.releaseAll("Trim", a.vm != nil && why == nil)
		return err
	}, func() error {
		err := unpinAll(a.drv.HostFree, host)
		if why != nil {
			a.opts.logger().Warn("capalloc: graph memory not trimmed, free chunks not unmapped", "backend", a.backend, "reason", why)
		} else if trims {
			err = errors.Join(err, t.TrimGraphMemory())
		}
		return err
	})
}

// Free releases b. Outside capture a pooled buffer returns to the pool
// (stream-ordered: work already queued that uses it still sees it). Inside
// a capture, a buffer allocated in this capture becomes a free node; a
// buffer from before the capture is retired now and its memory is held
// until the graph is closed, since the graph may still touch it.
func (a *Allocator) Free(b Buffer) error {
	if a.lane.free(b) {
		return nil
	}
	a.mu.Lock()
	st, err := a.guard.stateLocked()
	if err == nil {
		err = a.validateLocked(b, 0, 0)
	}
	if err == nil && b.isView() {
		err = wrapf(ErrInvalidBuffer, "buffer %#x is a view; free the buffer it was sliced from", b.ptr)
	}
	if err == nil && b.blk.ws != "" {
		err = wrapf(ErrInvalidBuffer, "buffer %#x is workspace %q; use ReleaseWorkspace", b.ptr, b.blk.ws)
	}
	if err != nil {
		a.mu.Unlock()
		return a.fail("Free", b.size, st, err)
	}
	blk := b.blk
	if st == StateNone && blk.kind == kindSync {
		a.mu.Unlock()
		return a.freeSync(b)
	}
	err = a.freeLocked(st, blk, b.gen)
	a.mu.Unlock()
	if err != nil {
		return a.fail("Free", b.size, st, err)
	}
	return nil
}

// freeLocked frees blk, handed out with gen. Caller holds a.mu.
func (a *Allocator) freeLocked(st CaptureState, blk *block, gen uint64) error {
	switch st {
	case StateNone:
		if blk.kind == kindGraph || blk.kind == kindShared {
			return wrapf(ErrInvalidBuffer, "buffer %#x belongs to a graph; Graph.Close releases it", blk.ptr)
		}
		if err := a.claimLocked(blk, gen); err != nil { // a lane Free may have won
			return err
		}
		a.releases.releaseLocked(blk) // held while a live graph uses it
		return nil
	case StateActive:
		c := a.guard.cap
		if blk.kind == kindGraph {
			if blk.cap != c {
				return wrapf(ErrInvalidBuffer, "buffer %#x belongs to another graph", blk.ptr)
			}
			if err := a.drv.FreeAsync(blk.ptr, a.stream); err != nil {
				return refusedInCapture(a.drv, a.stream, err)
			}
			if err := afterCaptured(a.drv, a.stream, "Free"); err != nil {
				return err
			}
			blk.freedInGraph = true
			a.retireLocked(blk)
			return nil
		}
		if blk.kind == kindShared {
			return c.freePooledLocked(a, blk, gen)
		}
		a.retireLocked(blk)
		c.deferred = append(c.deferred, blk)
		return nil
	}
	return refusal(st, "free")
}

// Slice returns a view of n bytes of b starting at off. off must keep the
// device's alignment guarantee (Info().Alignment), which kernels rely on for
// vectorized access. A view is valid while b is and cannot be freed itself.
func (a *Allocator) Slice(b Buffer, off, n int64) (Buffer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.guard.closed {
		return Buffer{}, a.fail("Slice", n, StateNone, ErrClosed)
	}
	if err := a.validateLocked(b, off, n); err != nil {
		return Buffer{}, a.fail("Slice", n, StateNone, err)
	}
	if n == 0 {
		return Buffer{}, a.fail("Slice", n, StateNone, wrapf(ErrInvalidSize, "empty view"))
	}
	if al := a.info.Alignment; al > 0 && (uint64(b.ptr)+uint64(off))%uint64(al) != 0 {
		return Buffer{}, a.fail("Slice", n, StateNone, wrapf(ErrMisaligned, "offset %d breaks the %d-byte alignment", off, al))
	}
	return Buffer{blk: b.blk, gen: b.gen | viewBit, ptr: b.ptr + driver.DevicePtr(off), size: n}, nil
}

// A block's life, as Alloc and Free see it; caller holds a.mu.

// handOutLocked makes b a live buffer of size bytes, publishing owed with
// the allocation (at most 0: bytes the lane's shards freed, from
// lane.flushOwedLocked; 0 elsewhere).
func (a *Allocator) handOutLocked(b *block, size, owed int64) Buffer {
	b.size = size
	gen := b.handOut() // odd: live
	if b.kind == kindPooled {
		a.pooledLive++
	} else {
		a.live.push(b)
	}
	a.stats.Allocs++
	a.stats.inUse.add(size + owed)
	if a.wsAlloc != "" {
		b.ws = a.wsAlloc
	}
	if h := a.stats.hist; h != nil {
		h.record(evAlloc, b.ptr, size, blockTag(b), b.ws)
	}
	return Buffer{blk: b, gen: gen, ptr: b.ptr, size: size}
}

// handOut makes b live and returns the generation its Buffer holds: an
// armed state (odd while free: never handed out) as it is, else the next
// odd one. Caller owns b (a.mu, or the lane shard's lock that held it).
func (b *block) handOut() uint64 {
	if gen := b.state.Load(); gen&1 == 1 {
		return gen
	}
	return b.state.Add(1)
}

// disarm makes a free record's armed state even again, for a block that
// leaves the pool without being handed out (lent to a graph pool), so it
// does not read as live. Caller holds a.mu.
func (b *block) disarm() {
	if b.state.Load()&1 == 1 {
		b.state.Add(1)
	}
}

// retireLocked ends the life of live block b, invalidating every handle.
// Only for blocks no lane Free (shard.go) can race for: the lane is closed, or
// b is not pooled. A Free takes the block with claimLocked instead.
func (a *Allocator) retireLocked(b *block) {
	_ = a.claimLocked(b, b.state.Load()) // nothing races for b: cannot fail
}

// claimLocked retires b for a Free of the Buffer handed out with gen: it
// fails when b is no longer that Buffer's, even when a lane Free of the
// same Buffer won the race since the caller validated it.
func (a *Allocator) claimLocked(b *block, gen uint64) error {
	if !b.state.CompareAndSwap(gen, gen+1) {
		return wrapf(ErrInvalidBuffer, "buffer %#x was freed (double free or use after free)", b.ptr)
	}
	if b.kind == kindPooled {
		a.pooledLive--
	} else {
		a.live.remove(b)
	}
	a.stats.Frees++
	a.stats.inUse.add(-b.size)
	if h := a.stats.hist; h != nil {
		h.record(evFree, b.ptr, b.size, blockTag(b), "")
	}
	return nil
}

// meter is a byte count and its peak, kept with atomics: the bytes in use
// (counters.inUse) rise at a hand-out and fall at a claim, below, and the
// lane publishes what it allocated into it without a.mu (shard.go).
type meter struct {
	cur, peak atomic.Int64
}

func (m *meter) add(n int64) {
	v := m.cur.Add(n)
	for p := m.peak.Load(); v > p && !m.peak.CompareAndSwap(p, v); p = m.peak.Load() {
	}
}
