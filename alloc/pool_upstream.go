package alloc

import (
	"errors"
	"github.com/capalloc/capalloc/alloc/driver"
)

// upstream is where the pool's memory comes from: the driver calls it
// needs and nothing else (RMM's upstream resource). The Allocator's
// adapter, driverUpstream, makes them on its stream and counts them.
type upstream interface {
	allocate(n int64) (driver.DevicePtr, error) // a segment, stream-ordered (MallocAsync)
	free(p driver.DevicePtr, n int64) error     // a segment back, stream-ordered (FreeAsync)
	mapGranularity() int64                      // the virtual memory's; 0 when there is none
	reserve(n int64) (driver.DevicePtr, error)  // a range of addresses (ReserveAddress)
	mapMemory(p driver.DevicePtr, n int64) error
	unmapMemory(p driver.DevicePtr, n int64) error
}

// reclaimEnv is what the reclaim ladder (pool_reclaim.go) asks of the
// Allocator besides memory: the rungs that are not the pool's own.
type reclaimEnv interface {
	// flush moves the per-P caches' free blocks into the pool (the lane's
	// flush, shard.go).
	flush()
	// idle reports, without waiting, whether the stream has run everything
	// queued: false when the driver cannot tell. An error is one of earlier
	// work, reported (and cleared) as a synchronize would.
	idle() (bool, error)
	// drain waits until the stream has run everything queued.
	drain(op string) error
	// synchronize is drain with the driver's synchronize even when the
	// stream is idle: what a trim needs first.
	synchronize(op string) error
	// trim asks the driver to trim the memory closed graphs left cached
	// (GraphMemTrimmer) where the guard allows it now, and its stream-ordered
	// pool too (PoolTrimmer) when pools; it reports whether it did.
	trim(pools bool) bool
	// mayReleaseAll is strict capture safety's verdict on giving every
	// cached segment back now (nil: allowed).
	mayReleaseAll() error
	// retried counts one retry of the ladder (Stats.ReclaimRetries).
	retried()
	// releaseHost unpins the host cache's idle chunks where host memory
	// is the device's (unified memory); it reports whether it did
	// (hostcache.go). Only on sync paths, which hold the gate.
	releaseHost(op string) bool
}

// driverUpstream is the Allocator's side of the pool: the driver calls,
// on the allocator's stream, each counted in a.stats. Every method is
// called with a.mu held, by a caller that found no capture forbidding the
// call (guard.go); the blocking ones (synchronize) run under the watchdog.
type driverUpstream struct{ a *Allocator }

// allocate, and mapMemory, ask the memory limit first (limit.go): a
// refusal is an out-of-memory the reclaim ladder climbs like the driver's.
func (u driverUpstream) allocate(n int64) (driver.DevicePtr, error) {
	a := u.a
	if err := a.stats.limit.take(n); err != nil {
		return 0, err
	}
	p, err := a.drv.MallocAsync(n, a.stream)
	if err != nil {
		a.stats.limit.put(n)
		return p, err
	}
	a.stats.DriverAllocs++
	a.stats.addReserved(p, n)
	return p, nil
}

// addReserved counts n more bytes held from the driver, at p.
func (c *counters) addReserved(p driver.DevicePtr, n int64) {
	if c.hist != nil {
		c.hist.record(evMap, p, n, eventTag{}, "")
	}
	c.BytesReserved += n
	if c.BytesReserved > c.PeakReserved {
		c.PeakReserved = c.BytesReserved
	}
}

// givenBackLocked counts n bytes of one driver allocation, at p, as
// given back.
func (c *counters) givenBackLocked(p driver.DevicePtr, n int64) {
	if c.hist != nil {
		c.hist.record(evUnmap, p, n, eventTag{}, "")
	}
	c.DriverFrees++
	c.BytesReserved -= n
	c.limit.put(n)
}

// free counts the segment as given back even when the driver fails to
// free it: the driver has it, not the pool.
func (u driverUpstream) free(p driver.DevicePtr, n int64) error {
	err := u.a.drv.FreeAsync(p, u.a.stream)
	u.a.stats.givenBackLocked(p, n)
	return err
}

func (u driverUpstream) mapGranularity() int64 {
	if u.a.vm == nil {
		return 0
	}
	return u.a.vm.MapGranularity()
}

func (u driverUpstream) reserve(n int64) (driver.DevicePtr, error) { return u.a.vm.ReserveAddress(n) }

func (u driverUpstream) mapMemory(p driver.DevicePtr, n int64) error {
	if err := u.a.stats.limit.take(n); err != nil {
		return err
	}
	if err := u.a.vm.MapMemory(p, n); err != nil {
		u.a.stats.limit.put(n)
		return err
	}
	u.a.stats.DriverAllocs++
	u.a.stats.addReserved(p, n)
	return nil
}

// unmapMemory counts the chunk as given back even when the driver fails
// to unmap it: it is the driver's now.
func (u driverUpstream) unmapMemory(p driver.DevicePtr, n int64) error {
	err := u.a.vm.UnmapMemory(p, n)
	u.a.stats.givenBackLocked(p, n)
	return err
}

func (u driverUpstream) flush() { u.a.lane.flushLocked() }

func (u driverUpstream) idle() (bool, error) {
	if u.a.guard.idler == nil {
		return false, nil
	}
	return u.a.guard.idler.StreamIdle(u.a.stream)
}

// drain asks without waiting first, then synchronizes under the watchdog.
// The caller holds the gate's shared side, with no capture on the stream
// (host functions must not call the allocator, so nothing queued waits
// for a.mu).
func (u driverUpstream) drain(op string) error {
	a := u.a
	if a.guard.idler != nil {
		if idle, err := a.guard.idler.StreamIdle(a.stream); err != nil || idle {
			return err
		}
	}
	return u.synchronize(op)
}

// synchronize waits for the stream's work, always with the driver's
// synchronize: before a trim, a query that finds the stream idle is not
// enough. The runtime's pool releases memory whose stream-ordered free
// the host observed at a synchronization, and a query does not count
// (measured on an H200, CUDA 13.0: after the frees and an idle query,
// cudaMemPoolTrimTo(0) left 0.3 GB free of 140; after a synchronize it
// returned everything: cuda's TestGPUPoolTrimReturnsMemory and
// TestGPUAllocSyncUsesCachedPoolMemory).
func (u driverUpstream) synchronize(op string) error {
	a := u.a
	_, err := a.guard.watchdog.run(op, a.guard.watchdog.timeout, func() error { return a.drv.StreamSynchronize(a.stream) }, nil)
	return err
}

// trim trims graph memory only if the guard allows it now, without
// waiting: a.mu is held, and the gate's order is gate before a.mu, so only
// TryRLock is safe here (a capture beginning meanwhile means no trim).
// Only called with no capture on the stream. The pool trim is made only
// by paths that hold the gate already (AllocSync's).
func (u driverUpstream) trim(pools bool) bool {
	a := u.a
	trimmed := false
	if t, ok := a.drv.(driver.GraphMemTrimmer); ok && a.guard.dom.gate.TryRLock() {
		if a.guard.unsafeAllowedLocked(StateNone, false) == nil {
			if err := t.TrimGraphMemory(); err != nil {
				a.opts.logger().Warn("capalloc: trim graph memory", "backend", a.backend, "err", err)
			} else {
				trimmed = true
			}
		}
		a.guard.dom.gate.RUnlock()
	}
	if t, ok := a.drv.(driver.PoolTrimmer); ok && pools {
		if err := t.TrimPool(); err != nil {
			a.opts.logger().Warn("capalloc: trim the driver's pool", "backend", a.backend, "err", err)
		} else {
			trimmed = true
		}
	}
	return trimmed
}

func (u driverUpstream) retried() { u.a.stats.ReclaimRetries++ }

func (u driverUpstream) mayReleaseAll() error {
	return u.a.guard.strictLocked("freeing cached segments")
}

// detach takes both expandable ranges out of the pool for Close: it
// counts their mapped chunks as given back and returns the calls that
// unmap them and release the reservations, for Close's unsafe cleanup to
// make after the stream's last synchronize.
func (u driverUpstream) detach() func() error {
	chunks, ranges := u.a.pool.detach()
	for _, c := range chunks {
		u.a.stats.givenBackLocked(c.p, c.size)
	}
	if len(ranges) == 0 {
		return nil
	}
	vm := u.a.vm
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
