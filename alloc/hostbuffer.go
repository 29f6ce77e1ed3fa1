package alloc

import (
	"github.com/capalloc/capalloc/alloc/driver"
	"sync/atomic"
)

// HostBuffer is pinned (page-locked) host memory. It is the only host memory
// a capture can copy from or into: a captured copy reads or writes its bytes
// at every replay, so an engine refreshes inputs by writing Bytes() between
// launches.
type HostBuffer struct {
	a      *Allocator
	drv    driver.Driver
	b      []byte
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

// HostAlloc returns size bytes of pinned host memory. Pinning is an unsafe
// call, so it is refused during captures that forbid one: allocate host
// buffers before capturing.
func (a *Allocator) HostAlloc(size int64) (*HostBuffer, error) {
	if size <= 0 {
		return nil, a.fail("HostAlloc", size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	var h *HostBuffer
	err := a.guard.blockingUndo("HostAlloc", size, nil, func(st CaptureState) error {
		if err := a.guard.unsafeRefusalLocked(st, false, "pinned host allocation"); err != nil {
			return err
		}
		return a.guard.strictLocked("pinned host allocation")
	}, func() (func(), error) {
		b, err := a.drv.HostAlloc(size)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		nh := &HostBuffer{a: a, drv: a.drv, b: b}
		a.hosts[nh] = struct{}{}
		a.stats.HostBuffers++
		a.stats.HostBytes += size
		h = nh
		// Abandoned by the watchdog: nobody holds nh, so release it, in
		// the watchdog's late path (cleanupLate: never into a capture).
		return func() {
			if nh.release() {
				a.releases.logLate("HostAlloc", a.releases.cleanupLate("HostAlloc", func() error { return a.drv.HostFree(nh.b) }))
			}
		}, nil
	})
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

// Close unpins and releases the memory. Work still queued that uses it must
// be finished first (Synchronize), as with cudaFreeHost.
func (h *HostBuffer) Close() error {
	a := h.a
	return a.guard.blocking("HostBuffer.Close", h.Size(), func(st CaptureState) error {
		if h.closed.Load() {
			return wrapf(ErrClosed, "HostBuffer closed twice")
		}
		if err := a.guard.unsafeRefusalLocked(st, false, "pinned host free"); err != nil {
			return err
		}
		return a.guard.strictLocked("pinned host free")
	}, func() error {
		if !h.release() {
			return wrapf(ErrClosed, "HostBuffer closed twice")
		}
		return a.drv.HostFree(h.b)
	})
}

// release marks h closed and drops it from its allocator's books; false if
// it was already closed.
func (h *HostBuffer) release() bool {
	if !h.closed.CompareAndSwap(false, true) {
		return false
	}
	a := h.a
	a.mu.Lock()
	if _, ok := a.hosts[h]; ok {
		delete(a.hosts, h)
		a.stats.HostBuffers--
		a.stats.HostBytes -= h.Size()
	}
	if h.prof != nil {
		a.prof.drop(h.prof)
		h.prof = nil
	}
	a.mu.Unlock()
	return true
}
