package gpurt

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/hostregion"
)

// hostRegion is one pinned buffer: C memory from the pinned host
// allocation, or, with Options.HostMemory, memory that source supplied and
// the host-register call pinned (supplied keeps it, to give back). Either
// lies outside the Go heap.
type hostRegion struct {
	start    uintptr
	size     int
	supplied []byte
	reg      bool // registered by HostRegister (hostreg.go): the caller's memory
	managed  bool // managed memory's host view (managed.go), freed with FreeManaged
}

func addr(b []byte) uintptr { return hostregion.Addr(b) }

// pinned reports whether b lies inside one HostAlloc buffer. The async
// copies require it: with pageable memory the runtime would copy
// synchronously (and a capture would record a snapshot, or fail).
func (d *Driver) pinned(b []byte) bool { return d.hosts.Holds(b) }

func (r hostRegion) Start() uintptr { return r.start }
func (r hostRegion) Len() int       { return r.size }

// HostAlloc is the pinned host allocation with the portable flag (pinned
// for every context, so the buffer does not depend on the current device),
// on the dev thread. The slice views C memory; it stays valid until
// HostFree. With Options.HostMemory the memory comes from there instead
// (the plugin server's shared memory) and is pinned with the host-register
// call (portable); a failed registration gives it back.
func (d *Driver) HostAlloc(size int64) ([]byte, error) {
	op := fmt.Sprintf("host alloc %d B", size)
	if d.closed.Load() {
		return nil, d.v.ErrClosed(op)
	}
	if err := d.checkSize(op, size); err != nil {
		return nil, err
	}
	if uint64(size) > uint64(^uint(0)>>1) {
		return nil, d.v.Errf(driver.ErrInvalidValue, "%s: larger than the address space", op)
	}
	var b, supplied []byte
	if hm := d.opts.HostMemory; hm != nil {
		var err error
		if b, err = hm.Alloc(size); err != nil {
			return nil, fmt.Errorf("%s: supplied host memory: %w", op, err)
		}
		if int64(len(b)) != size {
			_ = hm.Free(b)
			return nil, d.v.Errf(driver.ErrDriver, "%s: supplied host memory returned %d B", op, len(b))
		}
		err = d.dev.Do(op, func() error {
			return d.rt.Check(op, d.rt.HostRegister.Name, Call(d.rt.HostRegister.Addr, addr(b), uintptr(size), HostRegisterPortable))
		})
		if err != nil {
			_ = hm.Free(b)
			return nil, err
		}
		supplied = b
	} else {
		var p unsafe.Pointer // C writes a pointer to C memory: the GC ignores it
		err := d.dev.Do(op, func() error {
			return d.rt.Check(op, d.rt.HostAlloc.Name, Call(d.rt.HostAlloc.Addr, uintptr(unsafe.Pointer(&p)), uintptr(size), HostAllocPortable))
		})
		if err != nil {
			return nil, err
		}
		b = unsafe.Slice((*byte)(p), int(size))
	}
	d.mu.Lock()
	d.hosts.Insert(hostRegion{start: addr(b), size: int(size), supplied: supplied})
	d.mu.Unlock()
	return b, nil
}

// HostFree releases a HostAlloc buffer passed exactly as returned; the
// runtime's pinned free waits for work that may still use it.
func (d *Driver) HostFree(b []byte) error {
	op := fmt.Sprintf("host free %#x (%d B)", addr(b), len(b))
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	d.mu.Lock()
	r, ok := d.hosts.RemoveWhere(func(r hostRegion) bool {
		return !r.reg && !r.managed && len(b) > 0 && r.start == addr(b) && r.size == len(b)
	})
	d.mu.Unlock()
	if !ok {
		return d.v.Errf(driver.ErrInvalidValue, "%s: not a buffer from HostAlloc, or already freed", op)
	}
	return d.dev.Do(op, func() error { return d.freeHostRegion(op, r) })
}

// freeHostRegion releases r on the dev thread: the pinned free, or, for
// supplied memory, the host-unregister call and then the source's Free
// (which runs even when the unregistration failed, so nothing is kept
// twice).
func (d *Driver) freeHostRegion(op string, r hostRegion) error {
	if r.supplied == nil {
		return d.rt.Check(op, d.rt.HostFree.Name, Call(d.rt.HostFree.Addr, r.start))
	}
	err := d.rt.Check(op, d.rt.HostUnregister.Name, Call(d.rt.HostUnregister.Addr, r.start))
	if ferr := d.opts.HostMemory.Free(r.supplied); ferr != nil && err == nil {
		err = fmt.Errorf("%s: supplied host memory: %w", op, ferr)
	}
	return err
}
