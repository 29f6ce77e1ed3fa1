package cuda

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// createPool runs on the dev thread. A pool of our own (the default) keeps
// this driver's threshold from changing, or being changed by, other users
// of the device's default pool; DefaultPool shares that one instead. With
// Options.IPC the pool is created with cudaMemHandleTypePosixFileDescriptor,
// so it can be exported (ExportPool) to another process.
func (d *Driver) createPool() error {
	rt, dev := d.rt, d.opts.Device
	if d.opts.DefaultPool {
		if err := rt.check("get default memory pool", "cudaDeviceGetDefaultMemPool",
			call(rt.deviceGetDefaultMemPool, uintptr(unsafe.Pointer(&d.pool)), uintptr(dev))); err != nil {
			return err
		}
	} else {
		handles := int32(memHandleTypeNone)
		if d.opts.IPC {
			handles = memHandleTypePosixFD
		}
		props := memPoolProps{
			allocType:    memAllocationTypePinned,
			handleTypes:  handles,
			locationType: memLocationTypeDevice,
			locationID:   int32(dev),
		}
		if err := rt.check("create memory pool", "cudaMemPoolCreate",
			call(rt.memPoolCreate, uintptr(unsafe.Pointer(&d.pool)), uintptr(unsafe.Pointer(&props)))); err != nil {
			return err
		}
		d.ownPool = true
		if d.opts.IPC {
			// An exportable pool cannot serve graph allocations (801 in a
			// capture, measured on an H100): captures allocate from a
			// second pool that is not exportable.
			props.handleTypes = memHandleTypeNone
			if err := rt.check("create capture memory pool", "cudaMemPoolCreate",
				call(rt.memPoolCreate, uintptr(unsafe.Pointer(&d.capPool)), uintptr(unsafe.Pointer(&props)))); err != nil {
				d.destroyPool()
				return err
			}
		}
	}
	threshold := d.opts.threshold()
	for _, pool := range []uintptr{d.pool, d.capPool} {
		if pool == 0 {
			continue
		}
		if err := rt.check(fmt.Sprintf("set pool release threshold %d B", threshold), "cudaMemPoolSetAttribute",
			call(rt.memPoolSetAttribute, pool, memPoolAttrReleaseThreshold, uintptr(unsafe.Pointer(&threshold)))); err != nil {
			d.destroyPool()
			return err
		}
	}
	return nil
}

// destroyPool destroys a pool of our own; CUDA defers the release until
// its last allocation is freed.
func (d *Driver) destroyPool() {
	if d.ownPool && d.pool != 0 {
		call(d.rt.memPoolDestroy, d.pool)
	}
	if d.capPool != 0 {
		call(d.rt.memPoolDestroy, d.capPool)
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
	if err := rt.check(op, "cudaStreamCreateWithPriority", call(rt.streamCreateWithPriority, uintptr(unsafe.Pointer(&s)), d.opts.streamFlags(), 0)); err != nil {
		return err
	}
	defer call(rt.streamDestroy, s)
	if err := rt.check(op, "cudaMallocFromPoolAsync",
		call(rt.mallocFromPoolAsync, uintptr(unsafe.Pointer(&p)), uintptr(n), d.pool, s)); err != nil {
		return err
	}
	if err := rt.check(op, "cudaFreeAsync", call(rt.freeAsync, p, s)); err != nil {
		return err
	}
	return rt.check(op, "cudaStreamSynchronize", call(rt.streamSynchronize, s))
}

func checkSize(op string, size int64) error {
	if size <= 0 {
		return errf(alloc.ErrInvalidValue, "%s: size %d", op, size)
	}
	return nil
}

// Malloc is cudaMalloc, on the dev thread (it allocates on the current
// device). Unsafe: never called by alloc while a capture forbids it.
func (d *Driver) Malloc(size int64) (alloc.DevicePtr, error) {
	op := fmt.Sprintf("malloc %d B", size)
	if d.closed.Load() {
		return 0, errClosed(op)
	}
	if err := checkSize(op, size); err != nil {
		return 0, err
	}
	var p uintptr
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "cudaMalloc", call(d.rt.malloc, uintptr(unsafe.Pointer(&p)), uintptr(size)))
	})
	return alloc.DevicePtr(p), err
}

// Free is cudaFree, on the dev thread. Unsafe.
func (d *Driver) Free(p alloc.DevicePtr) error {
	op := fmt.Sprintf("free %#x", uint64(p))
	if d.closed.Load() {
		return errClosed(op)
	}
	if p == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null pointer", op)
	}
	return d.dev.do(op, func() error { return d.rt.check(op, "cudaFree", call(d.rt.free, uintptr(p))) })
}

// MallocAsync is cudaMallocFromPoolAsync on s: on a capturing stream it
// becomes a graph allocation node. It is made in Relaxed interaction mode
// (relaxed.go), so that growing the pool never invalidates another
// stream's Global-mode capture.
func (d *Driver) MallocAsync(size int64, s alloc.Stream) (alloc.DevicePtr, error) {
	const op = "malloc async"
	if err := d.checkStream(op, s); err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, errf(alloc.ErrInvalidValue, "%s: size %d", op, size)
	}
	pool := d.pool
	if d.capPool != 0 { // ipc: a capture allocates from the pool that is not exportable
		if st, err := d.StreamCaptureStatus(s); err == nil && st != alloc.DriverCaptureNone {
			pool = d.capPool
		}
	}
	var p uint64
	code := d.relaxed(func() int32 {
		var c int32
		c, p = callHot(d.rt.mallocFromPoolAsync, outArg, uintptr(size), pool, uintptr(s))
		return c
	})
	if code != 0 {
		return 0, d.rt.fail(fmt.Sprintf("%s %d B", op, size), "cudaMallocFromPoolAsync", code)
	}
	return alloc.DevicePtr(p), nil
}

// FreeAsync is cudaFreeAsync on s, in Relaxed interaction mode like
// MallocAsync.
func (d *Driver) FreeAsync(p alloc.DevicePtr, s alloc.Stream) error {
	const op = "free async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if p == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null pointer", op)
	}
	if code := d.relaxed(func() int32 { return first(callHot(d.rt.freeAsync, uintptr(p), uintptr(s))) }); code != 0 {
		return d.rt.fail(fmt.Sprintf("%s %#x", op, uint64(p)), "cudaFreeAsync", code)
	}
	return nil
}
