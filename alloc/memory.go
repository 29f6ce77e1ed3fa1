package alloc

import (
	"errors"
	"fmt"

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
	if b, ok := a.laneAlloc(size); ok {
		return b, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	st, err := a.stateLocked()
	if err != nil {
		return Buffer{}, a.fail("Alloc", size, st, err)
	}
	if size > a.info.TotalMemory {
		return Buffer{}, a.fail("Alloc", size, st, a.oomLocked(size, "larger than the device"))
	}
	var b Buffer
	switch st {
	case StateNone:
		if b, err = a.poolAllocLocked(size); err == nil && a.eager != nil {
			a.eager.bufs = append(a.eager.bufs, b) // an eager graph's run owns it
		}
	case StateActive:
		b, err = a.captureAllocLocked("Alloc", size)
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

func (a *Allocator) oomLocked(size int64, why string) error {
	return wrapf(ErrOutOfMemory, "%s (device %d B); %s", why, a.info.TotalMemory, a.statsLocked())
}

func (a *Allocator) poolAllocLocked(size int64) (Buffer, error) {
	n := a.pool.round(size)
	// The lane found no block of this size in the caller's shard: best fit
	// sees every cached block, as the pool's recent ones (shard.go).
	a.flushShardsLocked()
	if b := a.pool.get(n); b != nil {
		a.stats.PoolHits++
		return a.handOutLocked(b, size), nil
	}
	a.stats.PoolMisses++
	b, err := a.growPoolLocked(n)
	if errors.Is(err, ErrOutOfMemory) {
		return Buffer{}, fmt.Errorf("%w; %s", err, a.oomLocked(size, "driver out of memory"))
	}
	if err != nil {
		return Buffer{}, err
	}
	return a.handOutLocked(b, size), nil
}

// growPoolLocked makes a new segment for a request of n bytes (rounded)
// the pool could not serve and returns the request's block. When the
// driver is out of memory it gives back wholly free segments, as few as
// make room, and retries; then tries a segment of just n bytes (a device
// too small for the usual segment size); then, last, gives back every free
// segment and the memory closed graphs left cached (GraphMemTrimmer).
func (a *Allocator) growPoolLocked(n int64) (*block, error) {
	// Strict: no pool growth that the documented rules would make in
	// Relaxed interaction mode (another stream's Global capture).
	if err := a.strictRelaxedLocked("pool growth"); err != nil {
		return nil, err
	}
	if a.vm != nil {
		if b, ok, err := a.growExpandableLocked(n); ok || err != nil {
			return b, err
		}
	}
	sizes := [2]int64{segmentSize(n), n}
	var err error
	for i, size := range sizes {
		if i == 1 && size == sizes[0] {
			break
		}
		var p driver.DevicePtr
		p, err = a.drv.MallocAsync(size, a.stream)
		if errors.Is(err, ErrOutOfMemory) {
			freed, ferr := a.freeSegmentsLocked(a.pool.takeFor(size))
			if ferr != nil {
				return nil, errors.Join(err, ferr)
			}
			if freed {
				p, err = a.drv.MallocAsync(size, a.stream)
			}
		}
		if err == nil {
			return a.newSegmentLocked(p, size, n), nil
		}
		if !errors.Is(err, ErrOutOfMemory) {
			return nil, err
		}
	}
	freed, ferr := a.releaseCacheLocked()
	if ferr != nil {
		return nil, errors.Join(err, ferr)
	}
	if a.tryTrimGraphMemoryLocked() || freed {
		var p driver.DevicePtr
		if p, err = a.drv.MallocAsync(n, a.stream); err == nil {
			return a.newSegmentLocked(p, n, n), nil
		}
	}
	return nil, err
}

// newSegmentLocked counts a fresh driver allocation of size bytes and makes
// it a pool segment, returning its first n bytes.
func (a *Allocator) newSegmentLocked(p driver.DevicePtr, size, n int64) *block {
	a.stats.DriverAllocs++
	a.stats.addReserved(size)
	return a.pool.addSegment(a, p, size, n)
}

// captureAllocLocked makes an allocation node in the active capture.
func (a *Allocator) captureAllocLocked(op string, size int64) (Buffer, error) {
	p, err := a.drv.MallocAsync(size, a.stream)
	if err != nil {
		return Buffer{}, a.refusedInCaptureLocked(err)
	}
	if err := a.afterCapturedLocked(op); err != nil {
		return Buffer{}, err // the driver releases memory of an invalidated capture
	}
	c := a.cap
	b := &block{a: a, ptr: p, class: size, kind: kindGraph, cap: c}
	c.blocks = append(c.blocks, b)
	c.allocs++
	a.stats.CaptureAllocs++
	a.stats.DriverAllocs++
	a.stats.addReserved(size)
	return a.handOutLocked(b, size), nil
}

// afterCapturedLocked re-reads the driver's capture status after a call was
// recorded: a driver that invalidated the capture while reporting success is
// reported, not trusted.
func (a *Allocator) afterCapturedLocked(op string) error {
	st, err := a.drv.StreamCaptureStatus(a.stream)
	if err != nil {
		return err
	}
	if st != driver.CaptureActive {
		return wrapf(ErrCaptureInvalidated, "driver invalidated the capture during %s", op)
	}
	return nil
}

// refusedInCaptureLocked completes the error of a call the driver refused
// while this allocator's capture records. A refusal because of the capture
// (ErrCaptureIllegalOp: CUDA's 900, 906, 907) does not always invalidate
// it, so the driver's status is read again and the error says which: it
// also wraps ErrCaptureInvalidated when the capture is gone, and says the
// capture is still active otherwise (EndCapture will then succeed).
func (a *Allocator) refusedInCaptureLocked(err error) error {
	if !errors.Is(err, driver.ErrCaptureIllegalOp) || errors.Is(err, ErrCaptureInvalidated) {
		return err
	}
	st, serr := a.drv.StreamCaptureStatus(a.stream)
	switch {
	case serr != nil:
		return errors.Join(err, serr)
	case st == driver.CaptureActive:
		return fmt.Errorf("%w (the capture is still active)", err)
	}
	return fmt.Errorf("%w (%w by the refusal)", err, ErrCaptureInvalidated)
}

// releaseCacheLocked gives every wholly free segment back to the driver
// and reports whether there was any. Only called with no capture on the
// stream, so the frees are not recorded.
func (a *Allocator) releaseCacheLocked() (bool, error) {
	if err := a.strictLocked("freeing cached segments"); err != nil {
		return false, err
	}
	a.flushShardsLocked()
	return a.freeSegmentsLocked(a.pool.takeAll())
}

// freeSegmentsLocked gives segments the pool took out back to the driver
// (stream-ordered) and reports whether there were any. A segment whose
// free fails is still counted as gone: the driver has it, not the pool.
func (a *Allocator) freeSegmentsLocked(segs []*segment) (bool, error) {
	var errs []error
	for _, s := range segs {
		if err := a.drv.FreeAsync(s.ptr, a.stream); err != nil {
			errs = append(errs, err)
		}
		a.givenBackLocked(s.size)
	}
	return len(segs) > 0, errors.Join(errs...)
}

// Trim gives the pool's cached memory back to the driver and, when the
// driver implements GraphMemTrimmer, the memory that closed graphs left
// cached (cudaDeviceGraphMemTrim). It is refused during a capture on the
// allocator's stream. The graph trim is device-wide: while a Global-mode
// capture is active elsewhere in the domain it is skipped (the pool's
// cache is still released) and a warning is logged.
func (a *Allocator) Trim() error {
	t, trims := a.drv.(driver.GraphMemTrimmer)
	var why error // why the graph trim and the unmapping are skipped
	return a.blocking("Trim", -1, func(st CaptureState) error {
		if st != StateNone {
			return refusal(st, "trim frees memory")
		}
		if _, err := a.releaseCacheLocked(); err != nil {
			return err
		}
		if trims || a.vm != nil {
			why = a.unsafeAllowedLocked(st, false)
		}
		if a.vm != nil && why == nil {
			_, err := a.unmapAllFreeLocked("Trim")
			return err
		}
		return nil
	}, func() error {
		switch {
		case !trims && a.vm == nil:
			return nil
		case why != nil:
			a.opts.logger().Warn("capalloc: graph memory not trimmed, free chunks not unmapped", "backend", a.backend, "reason", why)
			return nil
		case !trims:
			return nil
		}
		return t.TrimGraphMemory()
	})
}

// tryTrimGraphMemoryLocked trims graph memory if the driver can and the
// guard allows it now, without waiting: a.mu is held, and the gate's order
// is gate before a.mu, so only TryRLock is safe here (a capture beginning
// meanwhile means no trim). Only called with no capture on the stream. It
// reports whether it trimmed.
func (a *Allocator) tryTrimGraphMemoryLocked() bool {
	t, ok := a.drv.(driver.GraphMemTrimmer)
	if !ok || !a.dom.gate.TryRLock() {
		return false
	}
	defer a.dom.gate.RUnlock()
	if a.unsafeAllowedLocked(StateNone, false) != nil {
		return false
	}
	if err := t.TrimGraphMemory(); err != nil {
		a.opts.logger().Warn("capalloc: trim graph memory", "backend", a.backend, "err", err)
		return false
	}
	return true
}

// Free releases b. Outside capture a pooled buffer returns to the pool
// (stream-ordered: work already queued that uses it still sees it). Inside
// a capture, a buffer allocated in this capture becomes a free node; a
// buffer from before the capture is retired now and its memory is held
// until the graph is closed, since the graph may still touch it.
func (a *Allocator) Free(b Buffer) error {
	if a.laneFree(b) {
		return nil
	}
	a.mu.Lock()
	st, err := a.stateLocked()
	if err == nil {
		err = a.validateLocked(b, 0, 0)
	}
	if err == nil && b.view {
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
		if blk.kind == kindGraph {
			return wrapf(ErrInvalidBuffer, "buffer %#x belongs to a graph; Graph.Close releases it", blk.ptr)
		}
		if err := a.claimLocked(blk, gen); err != nil { // a lane Free may have won
			return err
		}
		a.releaseLocked(blk) // held while a live graph uses it
		return nil
	case StateActive:
		c := a.cap
		if blk.kind == kindGraph {
			if blk.cap != c {
				return wrapf(ErrInvalidBuffer, "buffer %#x belongs to another graph", blk.ptr)
			}
			if err := a.drv.FreeAsync(blk.ptr, a.stream); err != nil {
				return a.refusedInCaptureLocked(err)
			}
			if err := a.afterCapturedLocked("Free"); err != nil {
				return err
			}
			blk.freedInGraph = true
			a.retireLocked(blk)
			return nil
		}
		a.retireLocked(blk)
		c.deferred = append(c.deferred, blk)
		return nil
	}
	return refusal(st, "free")
}

// AllocSync is the eager, synchronous allocation (cudaMalloc): outside the
// pool, never a graph node. It is an unsafe call: refused during this
// allocator's own Global or ThreadLocal capture, during any capture the
// allocator did not start, and (in Global interaction mode) while a
// Global-mode capture is active anywhere in the domain. In a Relaxed
// capture it is allowed and the memory is ordinary eager memory.
func (a *Allocator) AllocSync(size int64) (Buffer, error) {
	if size <= 0 {
		return Buffer{}, a.fail("AllocSync", size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	var (
		buf       Buffer
		capturing bool // a (Relaxed) capture of ours is recording
	)
	err := a.blockingUndo("AllocSync", size, nil, func(st CaptureState) error {
		capturing = st != StateNone
		if size > a.info.TotalMemory {
			return a.oomLocked(size, "larger than the device")
		}
		if err := a.unsafeRefusalLocked(st, false, "eager synchronous allocation"); err != nil {
			return err
		}
		return a.strictLocked("eager synchronous allocation")
	}, func() (func(), error) {
		p, err := a.drv.Malloc(size)
		if errors.Is(err, ErrOutOfMemory) && !capturing {
			if released, gerr := a.giveBackForSync(); gerr != nil {
				return nil, errors.Join(err, gerr)
			} else if released {
				p, err = a.drv.Malloc(size)
			}
		}
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		b := &block{a: a, ptr: p, class: size, kind: kindSync}
		a.stats.DriverAllocs++
		a.stats.addReserved(size)
		if a.cap != nil {
			a.cap.allocs++
			a.stats.CaptureAllocs++
		}
		nb := a.handOutLocked(b, size)
		buf = nb
		// Abandoned by the watchdog: nobody holds nb, so free it, in the
		// watchdog's late path (cleanupLate: never into a capture).
		return func() {
			a.mu.Lock()
			mine := b.validFor(nb.gen) // Close may have freed it
			if mine {
				a.retireLocked(b)
				a.releasedLocked(b)
			}
			a.mu.Unlock()
			if mine {
				a.logLate("AllocSync", a.cleanupLate("AllocSync", func() error { return a.drv.Free(p) }))
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

// giveBackForSync makes room for a synchronous allocation that ran out of
// memory: the pool's free segments go back to the driver, the stream is
// synchronized so those stream-ordered frees complete, and the driver's
// own caches are trimmed (PoolTrimmer, GraphMemTrimmer). It reports whether
// anything was given back, and an error the give-back met (an asynchronous
// error of earlier work surfacing at the synchronize, say), which the
// caller reports with the out-of-memory rather than hide it. The caller
// holds the gate's read side, and the stream is not capturing.
func (a *Allocator) giveBackForSync() (bool, error) {
	a.mu.Lock()
	released, err := a.releaseCacheLocked()
	if a.tryTrimGraphMemoryLocked() {
		released = true
	}
	if err == nil && a.vm != nil {
		var unmapped bool
		unmapped, err = a.unmapAllFreeLocked("AllocSync")
		released = released || unmapped
	}
	a.mu.Unlock()
	if err != nil {
		return false, err
	}
	if released {
		if err := a.drv.StreamSynchronize(a.stream); err != nil {
			return false, err
		}
	}
	if t, ok := a.drv.(driver.PoolTrimmer); ok {
		if err := t.TrimPool(); err == nil {
			released = true
		}
	}
	return released, nil
}

// freeSync releases an AllocSync buffer with the driver's synchronous Free,
// through the guard's blocking path. A capture that began meanwhile defers
// it, as Free does during a capture; a live graph that uses the buffer
// holds it until the graph closes.
func (a *Allocator) freeSync(b Buffer) error {
	var deferred bool // a capture began meanwhile: freeLocked took it
	return a.blocking("Free", b.size, func(st CaptureState) error {
		if err := a.validateLocked(b, 0, 0); err != nil {
			return err
		}
		if st != StateNone {
			deferred = true
			return a.freeLocked(st, b.blk, b.gen)
		}
		if err := a.unsafeRefusalLocked(st, false, "synchronous free"); err != nil {
			return err
		}
		return a.strictLocked("synchronous free")
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
		a.releasedLocked(blk)
		a.mu.Unlock()
		return a.drv.Free(b.ptr)
	})
}

// Slice returns a view of n bytes of b starting at off. off must keep the
// device's alignment guarantee (Info().Alignment), which kernels rely on for
// vectorized access. A view is valid while b is and cannot be freed itself.
func (a *Allocator) Slice(b Buffer, off, n int64) (Buffer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
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
	return Buffer{blk: b.blk, gen: b.gen, ptr: b.ptr + driver.DevicePtr(off), size: n, view: true}, nil
}
