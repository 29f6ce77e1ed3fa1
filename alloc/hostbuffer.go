package alloc

import "sync/atomic"

// HostBuffer is pinned (page-locked) host memory. It is the only host memory
// a capture can copy from or into: a captured copy reads or writes its bytes
// at every replay, so an engine refreshes inputs by writing Bytes() between
// launches.
type HostBuffer struct {
	a      *Allocator
	drv    Driver
	b      []byte
	closed atomic.Bool
}

// Bytes is the buffer's memory. Between a stream-ordered copy and the
// synchronize that completes it, its contents are undefined. Nil after Close.
func (h *HostBuffer) Bytes() []byte {
	if h.closed.Load() {
		return nil
	}
	return h.b
}

// Len is the size in bytes.
func (h *HostBuffer) Len() int64 { return int64(len(h.b)) }

// HostAlloc returns size bytes of pinned host memory. Pinning is an unsafe
// call, so it is refused during captures that forbid one: allocate host
// buffers before capturing.
func (a *Allocator) HostAlloc(size int64) (*HostBuffer, error) {
	if size <= 0 {
		return nil, a.fail("HostAlloc", size, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	var h *HostBuffer
	err := a.blocking("HostAlloc", size, func(st CaptureState) error {
		return a.unsafeRefusalLocked(st, false, "pinned host allocation")
	}, func() error {
		b, err := a.drv.HostAlloc(size)
		if err != nil {
			return err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		h = &HostBuffer{a: a, drv: a.drv, b: b}
		a.hosts[h] = struct{}{}
		a.stats.HostBuffers++
		a.stats.HostBytes += size
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Close unpins and releases the memory. Work still queued that uses it must
// be finished first (Synchronize), as with cudaFreeHost.
func (h *HostBuffer) Close() error {
	a := h.a
	return a.blocking("HostBuffer.Close", h.Len(), func(st CaptureState) error {
		if h.closed.Load() {
			return wrapf(ErrClosed, "HostBuffer closed twice")
		}
		return a.unsafeRefusalLocked(st, false, "pinned host free")
	}, func() error {
		if !h.closed.CompareAndSwap(false, true) {
			return wrapf(ErrClosed, "HostBuffer closed twice")
		}
		a.mu.Lock()
		delete(a.hosts, h)
		a.stats.HostBuffers--
		a.stats.HostBytes -= h.Len()
		a.mu.Unlock()
		return a.drv.HostFree(h.b)
	})
}
