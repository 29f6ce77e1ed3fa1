package alloc

import (
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// HostBuffer is pinned (page-locked) host memory. It is the only host memory
// a capture can copy from or into: a captured copy reads or writes its bytes
// at every replay, so an engine refreshes inputs by writing Bytes() between
// launches.
type HostBuffer struct {
	a      *Allocator
	drv    driver.Driver
	b      []byte
	slot   *hostSlot             // the cache's memory (hostcache.go); nil: pinned for this buffer alone
	reg    driver.HostRegisterer // the caller's memory, registered (Host.Register); nil: pinned here
	mm     driver.ManagedMemory  // managed memory (Host.AllocManaged), freed with it
	mapped bool                  // the caller's memory, mapped with no driver call (Host.MapHost)
	dev    driver.DevicePtr      // its device address, where the driver gave one
	closed atomic.Bool
	prof   *sample // the profile's record of this allocation (a.mu)
}

// Bytes is the buffer's memory. Between a stream-ordered copy and the
// synchronize that completes it, its contents are undefined. Nil after Close.
func (h *HostBuffer) Bytes() []byte {
	if h.closed.Load() {
		return nil
	}
	return h.b
}

// Size is the number of bytes, as Buffer.Size.
func (h *HostBuffer) Size() int64 { return int64(len(h.b)) }

// HostAlloc returns size bytes of pinned host memory, from the allocator's
// cache of freed host buffers when it holds one of the size's class that
// the stream is past (hostcache.go): such a hit makes no driver call, so it
// is allowed during a capture (strict safety included), and a buffer taken
// during a capture is held by its graph until Graph.Close. Otherwise it
// pins, an unsafe call, refused during captures that forbid one: allocate
// host buffers before capturing, or free them into the cache first.
func (a *Allocator) HostAlloc(size int64) (*HostBuffer, error) {
	if size <= 0 {
		return nil, a.fail("HostAlloc", size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	var h *HostBuffer
	var err error
	if !a.opts.NoHostCache {
		h, err = hostHit(a, size, true)
	}
	if h == nil && err == nil {
		h, err = hostPin(a, size)
	}
	if err != nil {
		return nil, err
	}
	if profileRate.Load() != 0 {
		a.mu.Lock()
		if !h.closed.Load() {
			a.prof.sample(nil, h, size)
		}
		a.mu.Unlock()
	}
	return h, nil
}

// hostHit serves HostAlloc from the cache: nil and no error on a miss.
// With query, a miss on memory that only waits for the stream asks
// whether the stream is done (Query, outside captures) and tries again.
func hostHit(a *Allocator, size int64, query bool) (*HostBuffer, error) {
	a.mu.Lock()
	st, err := a.guard.stateLocked()
	if err != nil {
		a.mu.Unlock()
		return nil, a.fail("HostAlloc", size, st, err)
	}
	if st != StateNone && st != StateActive {
		a.mu.Unlock()
		return nil, nil // the pinning path refuses, with the state's reason
	}
	s, pending := a.host.takeLocked(hostClassOf(size))
	if s == nil {
		a.mu.Unlock()
		if pending && query && st == StateNone {
			if done, err := a.Query(); err == nil && done {
				return hostHit(a, size, false)
			}
		}
		return nil, nil
	}
	if st == StateActive {
		a.host.refLocked(a.guard.cap, s)
	}
	h := &HostBuffer{a: a, drv: a.drv, b: s.b[:size:size], slot: s}
	a.hosts[h] = struct{}{}
	a.stats.HostBuffers++
	a.stats.HostBytes += size
	a.mu.Unlock()
	return h, nil
}

// hostPin is HostAlloc's pinning: a chunk for the size's class (the rest
// of it carved into the cache), or exactly size bytes with the cache off.
func hostPin(a *Allocator, size int64) (*HostBuffer, error) {
	cached := !a.opts.NoHostCache
	n := size
	if cached {
		n = hostChunkFor(hostClassOf(size))
	}
	var h *HostBuffer
	var ch *hostChunk
	err := a.guard.blockingUndo("HostAlloc", size, nil, func(st CaptureState) error {
		return a.guard.deviceWideRefusalLocked(st, "pinned host allocation")
	}, func() (func(), error) {
		b, err := a.drv.HostAlloc(n)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		nh := &HostBuffer{a: a, drv: a.drv, b: b}
		if cached {
			var s *hostSlot
			ch, s = a.host.addChunkLocked(b, hostClassOf(size))
			nh.b, nh.slot = s.b[:size:size], s
		} else {
			a.host.pins++
		}
		a.hosts[nh] = struct{}{}
		a.stats.HostBuffers++
		a.stats.HostBytes += size
		h = nh
		// Abandoned by the watchdog: nobody holds nh, so release it, in
		// the watchdog's late path (cleanupLate: never into a capture).
		return func() {
			if nh.unpinned() {
				a.releases.logLate("HostAlloc", a.releases.cleanupLate("HostAlloc", func() error { return a.drv.HostFree(b) }))
			}
		}, nil
	})
	if err != nil {
		return nil, err
	}
	if ch != nil {
		a.mu.Lock()
		a.host.carveLocked(ch)
		a.mu.Unlock()
	}
	return h, nil
}

// Close ends the buffer. Memory from the cache goes back to it with no
// driver call, so Close is allowed during a capture: it is reused once the
// stream is past the work queued before Close (and, if a capture's work
// uses it, once that graph is closed). With the cache off it unpins the
// memory, an unsafe call, refused during captures that forbid one; work
// still queued that uses it must be finished first (Synchronize), as
// with cudaFreeHost.
func (h *HostBuffer) Close() error {
	a := h.a
	if h.mapped {
		if !h.release() {
			return a.fail("HostBuffer.Close", h.Size(), StateNone, wrapf(ErrClosed, "HostBuffer closed twice"))
		}
		return nil
	}
	if h.slot != nil {
		a.mu.Lock()
		ok := h.releaseLocked()
		if ok {
			a.host.putLocked(h.slot)
		}
		a.mu.Unlock()
		if !ok {
			return a.fail("HostBuffer.Close", h.Size(), StateNone, wrapf(ErrClosed, "HostBuffer closed twice"))
		}
		return nil
	}
	return a.guard.blocking("HostBuffer.Close", h.Size(), func(st CaptureState) error {
		if h.closed.Load() {
			return wrapf(ErrClosed, "HostBuffer closed twice")
		}
		return a.guard.deviceWideRefusalLocked(st, "pinned host free")
	}, func() error {
		if !h.release() {
			return wrapf(ErrClosed, "HostBuffer closed twice")
		}
		return h.unpin()
	})
}

// unpin gives h's memory back to the driver: unregisters the caller's
// memory, or frees memory pinned for h alone.
func (h *HostBuffer) unpin() error {
	switch {
	case h.mapped:
		return nil
	case h.mm != nil:
		return h.mm.FreeManaged(h.dev)
	case h.reg != nil:
		return h.reg.HostUnregister(h.b)
	}
	return h.drv.HostFree(h.b)
}

// release marks h closed and drops it from its allocator's books; false if
// it was already closed.
func (h *HostBuffer) release() bool {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	return h.releaseLocked()
}

// unpinned is release for a buffer whose memory is about to be unpinned
// whole (an abandoned pinning): its chunk leaves the cache with it.
func (h *HostBuffer) unpinned() bool {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	if !h.releaseLocked() {
		return false
	}
	return h.slot == nil || h.a.host.dropChunkLocked(h.slot.chunk)
}

// releaseLocked is release with a.mu held.
func (h *HostBuffer) releaseLocked() bool {
	if !h.closed.CompareAndSwap(false, true) {
		return false
	}
	a := h.a
	if _, ok := a.hosts[h]; ok {
		delete(a.hosts, h)
		a.stats.HostBuffers--
		a.stats.HostBytes -= h.Size()
	}
	if h.prof != nil {
		a.prof.drop(h.prof)
		h.prof = nil
	}
	return true
}
