package alloc

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// hostRange checks that h is an open pinned buffer usable on drv and that
// [off, off+n) lies inside it, and returns those bytes.
func hostRange(drv driver.Driver, h *HostBuffer, off, n int64) ([]byte, error) {
	if h == nil {
		return nil, wrapf(ErrInvalidBuffer, "nil HostBuffer")
	}
	if h.closed.Load() {
		return nil, wrapf(ErrClosed, "HostBuffer was closed")
	}
	if h.drv != drv {
		return nil, wrapf(ErrInvalidBuffer, "HostBuffer belongs to another driver")
	}
	if off < 0 || n < 0 || off > int64(len(h.b)) || n > int64(len(h.b))-off {
		return nil, wrapf(ErrOutOfRange, "range [%d, %d+%d) outside HostBuffer of %d B", off, off, n, len(h.b))
	}
	return h.b[off : off+n : off+n], nil
}

// UploadHost copies n bytes from pinned src[srcOff:] to dst at dstOff,
// stream-ordered: src must not change until the stream passes the copy.
// Captured, the copy reads src's bytes at every replay.
func (a *Allocator) UploadHost(dst Buffer, dstOff int64, src *HostBuffer, srcOff, n int64) error {
	return hostCopy(a, "UploadHost", true, dst, dstOff, src, srcOff, n)
}

// DownloadHost copies n bytes from src at srcOff into pinned dst[dstOff:],
// stream-ordered: dst holds them once the stream is synchronized. Captured,
// every replay writes dst again.
func (a *Allocator) DownloadHost(dst *HostBuffer, dstOff int64, src Buffer, srcOff, n int64) error {
	return hostCopy(a, "DownloadHost", false, src, srcOff, dst, dstOff, n)
}

// hostCopy enqueues a's op, a copy of n bytes between dev at devOff and
// pinned host at hostOff: into dev when toDev, out of it otherwise. Both
// ranges are checked before the driver is called, and a capture that
// records the copy holds host until its graph closes.
func hostCopy(a *Allocator, op string, toDev bool, dev Buffer, devOff int64, host *HostBuffer, hostOff, n int64) error {
	dst, src := dev, Buffer{}
	if !toDev {
		dst, src = src, dst
	}
	var hb []byte
	return a.guard.enqueue(op, n, dst, src, func() (err error) {
		if err = a.validateLocked(dev, devOff, n); err == nil {
			hb, err = hostRange(a.drv, host, hostOff, n)
		}
		if err == nil {
			a.host.refLocked(a.guard.cap, host.slot)
		}
		return err
	}, func() error {
		p := dev.ptr + driver.DevicePtr(devOff)
		if toDev {
			return a.drv.CopyHtoDAsync(p, hb, a.stream)
		}
		return a.drv.CopyDtoHAsync(hb, p, a.stream)
	})
}

// Memset sets n bytes of dst from off to value, stream-ordered (the
// arguments in MemsetAsync's order: where, value, how many).
func (a *Allocator) Memset(dst Buffer, off int64, value byte, n int64) error {
	return a.guard.enqueue("Memset", n, dst, Buffer{}, func() error {
		return a.validateLocked(dst, off, n)
	}, func() error {
		return a.drv.MemsetAsync(dst.ptr+driver.DevicePtr(off), value, n, a.stream)
	})
}

// Copy copies n bytes between device buffers, stream-ordered.
func (a *Allocator) Copy(dst Buffer, dstOff int64, src Buffer, srcOff, n int64) error {
	return a.guard.enqueue("Copy", n, dst, src, func() error {
		if err := a.validateLocked(dst, dstOff, n); err != nil {
			return err
		}
		return a.validateLocked(src, srcOff, n)
	}, func() error {
		return a.drv.CopyDtoDAsync(dst.ptr+driver.DevicePtr(dstOff), src.ptr+driver.DevicePtr(srcOff), n, a.stream)
	})
}

// Upload copies pageable src into dst at off and returns when src may be
// reused. A pageable copy cannot be captured: during any capture it fails
// with ErrCaptureIncompatibleAllocation (use UploadHost with a HostBuffer).
func (a *Allocator) Upload(dst Buffer, off int64, src []byte) error {
	return pageableCopy(a, "Upload", true, dst, off, src)
}

// Download copies len(dst) bytes from src at off into pageable dst and
// returns when dst holds them (everything queued before is done). Refused
// during any capture like Upload.
func (a *Allocator) Download(dst []byte, src Buffer, off int64) error {
	return pageableCopy(a, "Download", false, src, off, dst)
}

// pageableCopy is a's blocking op, a copy of len(host) bytes between dev
// at off and pageable host: into dev when toDev, out of it otherwise.
// dev's range is checked, and any capture refuses it, before the driver
// is called.
func pageableCopy(a *Allocator, op string, toDev bool, dev Buffer, off int64, host []byte) error {
	n := int64(len(host))
	return a.guard.blockingOn(op, n, dev, func(st CaptureState) error {
		if err := a.validateLocked(dev, off, n); err != nil {
			return err
		}
		return a.guard.unsafeRefusalLocked(st, true, "pageable host memory cannot be copied during capture (use a HostBuffer)")
	}, func() error {
		p := dev.ptr + driver.DevicePtr(off)
		if toDev {
			return a.drv.CopyHtoD(p, host, a.stream)
		}
		return a.drv.CopyDtoH(host, p, a.stream)
	})
}

// Synchronize waits until all work queued on the stream is done. It is
// refused during any capture that forbids it, leaving the capture valid.
// With the watchdog on, a driver that can be polled is first polled on
// the caller's goroutine (waitPolled): work that ends within the quick
// polls costs no hand-off; a longer wait, and every wait on other drivers,
// is a watched blocking call.
func (a *Allocator) Synchronize() error {
	pos := a.host.begin() // the host cache's stream position (hostcache.go)
	err := a.guard.synchronize()
	if err == nil {
		a.host.pass(pos)
	}
	return err
}

// synchronize is Synchronize's wait.
func (g *guard) synchronize() error {
	if g.poll != nil && g.watchdog.timeout > 0 {
		if _, long, err := g.waitPolled("Synchronize", false, true); !long || err != nil {
			return err
		}
	}
	if idle, err := g.idleNow("Synchronize"); idle || err != nil {
		return err
	}
	return g.blocking("Synchronize", -1, g.syncRefusalLocked, func() error {
		return g.drv.StreamSynchronize(g.stream)
	})
}

// Query reports whether all queued work is done, under Synchronize's rules.
func (a *Allocator) Query() (bool, error) {
	pos := a.host.begin()
	done, err := a.guard.query()
	if done && err == nil {
		a.host.pass(pos)
	}
	return done, err
}

// query is Query's question.
func (g *guard) query() (bool, error) {
	if g.poll != nil && g.watchdog.timeout > 0 {
		if done, long, err := g.waitPolled("Query", true, false); !long || err != nil {
			return done, err
		}
	}
	if idle, err := g.idleNow("Query"); idle || err != nil {
		return idle && err == nil, err
	}
	var done atomic.Bool
	err := g.blocking("Query", -1, g.syncRefusalLocked, func() error {
		d, err := g.drv.StreamQuery(g.stream)
		done.Store(d)
		return err
	})
	if err != nil {
		return false, err
	}
	return done.Load(), nil
}

// LaunchHostFunc puts fn on the stream, stream-ordered: it runs once the
// work queued before it is done, and later work waits for it. Captured, it
// is a host node that runs at every replay (so it must read its inputs at
// run time, never capture values). An error from fn fails the stream: the
// next Synchronize reports it. fn must not call the allocator or driver.
// A driver that cannot launch host functions (a plugin) fails with an
// error wrapping errors.ErrUnsupported.
func (a *Allocator) LaunchHostFunc(fn func() error) error {
	l, ok := a.drv.(driver.HostFuncLauncher)
	return a.guard.enqueue("LaunchHostFunc", -1, Buffer{}, Buffer{}, func() error {
		switch {
		case fn == nil:
			return wrapf(ErrInvalidValue, "nil function")
		case !ok:
			return fmt.Errorf("%w: backend %s cannot launch host functions", errors.ErrUnsupported, a.backend)
		}
		return nil
	}, func() error {
		return l.LaunchHostFunc(a.stream, fn)
	})
}

// Enqueue makes a stream-ordered call of the engine's own (a kernel launch,
// a library's collective) through the guard: with no capture it is made at
// once; in a capture this allocator started it is recorded, and the
// buffers it uses stay reserved until the graph is closed; during any
// other capture it is refused before call runs. call gets the allocator's
// stream and must only enqueue work on it (never synchronize). uses must
// be live buffers of this allocator.
func (a *Allocator) Enqueue(op string, uses []Buffer, call func(s driver.Stream) error) error {
	if call == nil {
		return a.fail(op, -1, StateNone, wrapf(ErrInvalidValue, "nil call"))
	}
	return a.guard.enqueue(op, -1, Buffer{}, Buffer{}, func() error {
		for _, b := range uses {
			if err := a.validateLocked(b, 0, b.size); err != nil {
				return err
			}
		}
		return nil
	}, func() error {
		if err := call(a.stream); err != nil {
			return err
		}
		if c := a.guard.cap; c != nil {
			for _, b := range uses {
				refLocked(c, b.blk)
			}
		}
		return nil
	})
}
