package alloc

import (
	"errors"
)

// The eager, synchronous allocation and its free (cudaMalloc, cudaFree):
// outside the pool, never a graph node, each an unsafe call through the
// guard's blocking path, with the reclaim ladder's pathAllocSync row
// climbed when the driver runs out.

// AllocSync is the eager, synchronous allocation (cudaMalloc): outside the
// pool, never a graph node. It is an unsafe call: refused during this
// allocator's own Global or ThreadLocal capture, during any capture the
// allocator did not start, and (in Global interaction mode) while a
// Global-mode capture is active anywhere in the domain. In a Relaxed
// capture it is allowed and the memory is ordinary eager memory.
func (a *Allocator) AllocSync(size int64) (Buffer, error) {
	b, err := allocSync(a, size)
	if err != nil && a.opts.OnOutOfMemory != nil {
		return afterOutOfMemory(a, "AllocSync", size, err, func() (Buffer, error) { return a.AllocSync(size) })
	}
	return b, err
}

func allocSync(a *Allocator, size int64) (Buffer, error) {
	if size <= 0 {
		return Buffer{}, a.fail("AllocSync", size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	var (
		buf       Buffer
		capturing bool // a (Relaxed) capture of ours is recording
	)
	err := a.guard.blockingUndo("AllocSync", size, nil, func(st CaptureState) error {
		capturing = st != StateNone
		if why := neverFits(a, size); why != "" {
			return outOfMemoryVia(a, size, viaSync, why, nil)
		}
		return a.guard.deviceWideRefusalLocked(st, "eager synchronous allocation")
	}, func() (func(), error) {
		p, err := mallocSync(a, size)
		if errors.Is(err, ErrOutOfMemory) && !capturing {
			// The reclaim ladder (pathAllocSync), under a.mu but for the
			// retries: the synchronous Malloc is never made under it. The
			// gate's shared side is held and the guard allows unsafe calls
			// (the check), so free chunks may be unmapped.
			a.mu.Lock()
			r := reclaim{p: &a.pool, path: pathAllocSync, op: "AllocSync", need: size, unmap: a.vm != nil}
			err = r.climb(err, func() error {
				a.mu.Unlock()
				p, err = mallocSync(a, size)
				a.mu.Lock()
				if err != nil && a.guard.closed { // Close emptied the pool meanwhile: stop climbing
					return wrapf(ErrClosed, "closed during the retry: %v", err)
				}
				return err
			})
			a.mu.Unlock()
		}
		if err = afterSyncLadder(a, size, err); err != nil {
			return nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		b := &block{a: a, ptr: p, class: size, kind: kindSync}
		a.stats.DriverAllocs++
		a.stats.addReserved(p, size)
		if a.guard.cap != nil {
			a.guard.cap.allocs++
			a.stats.CaptureAllocs++
		}
		nb := a.handOutLocked(b, size, 0)
		buf = nb
		// Abandoned by the watchdog: nobody holds nb, so free it, in the
		// watchdog's late path (cleanupLate: never into a capture).
		return func() {
			a.mu.Lock()
			mine := b.validFor(nb.gen) // Close may have freed it
			if mine {
				a.retireLocked(b)
				a.releases.releasedLocked(b)
			}
			a.mu.Unlock()
			if mine {
				a.releases.logLate("AllocSync", a.releases.cleanupLate("AllocSync", func() error { return a.drv.Free(p) }))
			}
		}, nil
	})
	if err != nil {
		return Buffer{}, err
	}
	if profileRate.Load() != 0 {
		a.mu.Lock()
		if buf.blk.validFor(buf.gen) { // not freed meanwhile
			a.prof.sample(buf.blk, nil, size)
		}
		a.mu.Unlock()
	}
	return buf, nil
}

// freeSync releases an AllocSync buffer with the driver's synchronous Free,
// through the guard's blocking path. A capture that began meanwhile defers
// it, as Free does during a capture; a live graph that uses the buffer
// holds it until the graph closes.
func (a *Allocator) freeSync(b Buffer) error {
	var deferred bool // a capture began meanwhile: freeLocked took it
	return a.guard.blocking("Free", b.size, func(st CaptureState) error {
		if err := a.validateLocked(b, 0, 0); err != nil {
			return err
		}
		if st != StateNone {
			deferred = true
			return a.freeLocked(st, b.blk, b.gen)
		}
		return a.guard.deviceWideRefusalLocked(st, "synchronous free")
	}, func() error {
		if deferred {
			return nil
		}
		a.mu.Lock()
		blk := b.blk
		if !blk.validFor(b.gen) { // freed by another goroutine meanwhile
			a.mu.Unlock()
			return wrapf(ErrInvalidBuffer, "buffer %#x was freed (double free or use after free)", b.ptr)
		}
		a.retireLocked(blk)
		if blk.refs.Load() > 0 {
			blk.held.Store(true)
			a.mu.Unlock()
			return nil
		}
		a.releases.releasedLocked(blk)
		a.mu.Unlock()
		return a.drv.Free(b.ptr)
	})
}
