package gpurt

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// createPool runs on the dev thread. A pool of our own (the default) keeps
// this driver's threshold from changing, or being changed by, other users
// of the device's default pool; DefaultPool shares that one instead. With
// Options.IPC the pool is created with the POSIX file descriptor handle
// type, so it can be exported (ExportPool) to another process.
func (d *Driver) createPool() error {
	rt, v, dev := d.rt, d.v, d.opts.Device
	if d.opts.DefaultPool {
		if err := rt.Check("get default memory pool", rt.DeviceGetDefaultMemPool.Name,
			Call(rt.DeviceGetDefaultMemPool.Addr, uintptr(unsafe.Pointer(&d.pool)), uintptr(dev))); err != nil {
			return err
		}
	} else {
		handles := MemHandleTypeNone
		if d.opts.IPC {
			handles = MemHandleTypePosixFD
		}
		props := MemPoolProps{
			AllocType:    MemAllocationTypePinned,
			HandleTypes:  handles,
			LocationType: MemLocationTypeDevice,
			LocationID:   int32(dev),
		}
		if err := rt.Check("create memory pool", rt.MemPoolCreate.Name,
			Call(rt.MemPoolCreate.Addr, uintptr(unsafe.Pointer(&d.pool)), uintptr(unsafe.Pointer(&props)))); err != nil {
			return err
		}
		d.ownPool = true
		if d.opts.IPC && v.SeparateCapturePool {
			// An exportable pool cannot serve graph allocations (801 in a
			// capture, measured on an H100): captures allocate from a
			// second pool that is not exportable.
			props.HandleTypes = MemHandleTypeNone
			if err := rt.Check("create capture memory pool", rt.MemPoolCreate.Name,
				Call(rt.MemPoolCreate.Addr, uintptr(unsafe.Pointer(&d.capPool)), uintptr(unsafe.Pointer(&props)))); err != nil {
				d.destroyPool()
				return err
			}
		}
	}
	threshold := d.opts.Threshold()
	for _, pool := range []uintptr{d.pool, d.capPool} {
		if pool == 0 {
			continue
		}
		if err := rt.Check(fmt.Sprintf("set pool release threshold %d B", threshold), rt.MemPoolSetAttribute.Name,
			Call(rt.MemPoolSetAttribute.Addr, pool, MemPoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&threshold)))); err != nil {
			d.destroyPool()
			return err
		}
	}
	return nil
}

// destroyPool destroys a pool of our own; the runtime defers the release
// until its last allocation is freed.
func (d *Driver) destroyPool() {
	if d.ownPool && d.pool != 0 {
		Call(d.rt.MemPoolDestroy.Addr, d.pool)
	}
	if d.capPool != 0 {
		Call(d.rt.MemPoolDestroy.Addr, d.capPool)
	}
	d.pool, d.capPool, d.ownPool = 0, 0, false
}

// reserve allocates and frees Options.Reserve once on a private stream so
// the pool holds it (the threshold keeps it past the synchronize).
func (d *Driver) reserve() error {
	n := d.opts.Reserve
	if n == 0 {
		return nil
	}
	rt := d.rt
	op := fmt.Sprintf("reserve %d B", n)
	var s, p uintptr
	if err := rt.Check(op, rt.StreamCreateWithPriority.Name, Call(rt.StreamCreateWithPriority.Addr, uintptr(unsafe.Pointer(&s)), d.streamFlags(), 0)); err != nil {
		return err
	}
	defer Call(rt.StreamDestroy.Addr, s)
	if err := rt.Check(op, rt.MallocFromPoolAsync.Name,
		Call(rt.MallocFromPoolAsync.Addr, uintptr(unsafe.Pointer(&p)), uintptr(n), d.pool, s)); err != nil {
		return err
	}
	if err := rt.Check(op, rt.FreeAsync.Name, Call(rt.FreeAsync.Addr, p, s)); err != nil {
		return err
	}
	return rt.Check(op, rt.StreamSynchronize.Name, Call(rt.StreamSynchronize.Addr, s))
}

func (d *Driver) checkSize(op string, size int64) error {
	if size <= 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: size %d", op, size)
	}
	return nil
}

// Malloc is the synchronous malloc, on the dev thread (it allocates on the
// current device). Unsafe: never called by alloc while a capture forbids
// it.
func (d *Driver) Malloc(size int64) (driver.DevicePtr, error) {
	op := fmt.Sprintf("malloc %d B", size)
	if d.closed.Load() {
		return 0, d.v.ErrClosed(op)
	}
	if err := d.checkSize(op, size); err != nil {
		return 0, err
	}
	var p uintptr
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.Malloc.Name, Call(d.rt.Malloc.Addr, uintptr(unsafe.Pointer(&p)), uintptr(size)))
	})
	return driver.DevicePtr(p), err
}

// checkPtr refuses a call on p after Close, or on a null p, before the
// runtime sees it.
func (d *Driver) checkPtr(op string, p driver.DevicePtr) error {
	return d.checkHandle(op, uintptr(p), "pointer")
}

// checkHandle refuses a call after Close, or on a null h (what names it:
// "pointer", "graph", "graph exec"), before the runtime sees it.
func (d *Driver) checkHandle(op string, h uintptr, what string) error {
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	return d.nonNull(op, h, what)
}

// nonNull refuses a null h (what names it) before the runtime sees it.
func (d *Driver) nonNull(op string, h uintptr, what string) error {
	if h == 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: null %s", op, what)
	}
	return nil
}

// checkStreamHandle is checkStream, then nonNull of the call's handle h.
func (d *Driver) checkStreamHandle(op string, s driver.Stream, h uintptr, what string) error {
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	return d.nonNull(op, h, what)
}

// Free is the synchronous free, on the dev thread. Unsafe.
func (d *Driver) Free(p driver.DevicePtr) error {
	op := fmt.Sprintf("free %#x", uint64(p))
	if err := d.checkPtr(op, p); err != nil {
		return err
	}
	return d.dev.Do(op, func() error { return d.rt.Check(op, d.rt.Free.Name, Call(d.rt.Free.Addr, uintptr(p))) })
}

// MallocAsync is the pool allocation on s: on a capturing stream it
// becomes a graph allocation node. It is made in Relaxed interaction mode
// (relaxed.go), so that growing the pool never invalidates another
// stream's Global-mode capture.
func (d *Driver) MallocAsync(size int64, s driver.Stream) (driver.DevicePtr, error) {
	const op = "malloc async"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: size %d", op, size)
	}
	pool := d.pool
	if d.capPool != 0 { // ipc: a capture allocates from the pool that is not exportable
		if st, err := d.StreamCaptureStatus(s); err == nil && st != driver.CaptureNone {
			pool = d.capPool
		}
	}
	var p uint64
	code := d.relaxed(func() int32 {
		var c int32
		c, p = CallHot(d.rt.MallocFromPoolAsync.Addr, OutArg, uintptr(size), pool, uintptr(s))
		return c
	})
	if code != 0 {
		return 0, d.rt.Fail(fmt.Sprintf("%s %d B", op, size), d.rt.MallocFromPoolAsync.Name, code)
	}
	return driver.DevicePtr(p), nil
}

// FreeAsync is the stream-ordered free on s, in Relaxed interaction mode
// like MallocAsync.
func (d *Driver) FreeAsync(p driver.DevicePtr, s driver.Stream) error {
	const op = "free async"
	if err := d.checkStreamHandle(op, s, uintptr(p), "pointer"); err != nil {
		return err
	}
	if code := d.relaxed(func() int32 { return First(CallHot(d.rt.FreeAsync.Addr, uintptr(p), uintptr(s))) }); code != 0 {
		return d.rt.Fail(fmt.Sprintf("%s %#x", op, uint64(p)), d.rt.FreeAsync.Name, code)
	}
	return nil
}
