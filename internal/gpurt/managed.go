package gpurt

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.ManagedMemory = (*Driver)(nil)

// MallocManaged is the managed allocation with the global attach flag, on
// the dev thread. Unified addressing gives the host and the device one
// address: the slice views it, and joins the pinned set so the async
// copies take it (HostFree refuses it). Without the symbol it fails with
// errors.ErrUnsupported.
func (d *Driver) MallocManaged(size int64) (driver.DevicePtr, []byte, error) {
	op := fmt.Sprintf("malloc managed %d B", size)
	if d.closed.Load() {
		return 0, nil, d.v.ErrClosed(op)
	}
	if err := d.checkSize(op, size); err != nil {
		return 0, nil, err
	}
	if d.rt.MallocManaged.Addr == 0 {
		return 0, nil, fmt.Errorf("%w: %s: %s: the runtime lacks %s", errors.ErrUnsupported, d.v.Name, op, d.rt.MallocManaged.Name)
	}
	if uint64(size) > uint64(^uint(0)>>1) {
		return 0, nil, d.v.Errf(driver.ErrInvalidValue, "%s: larger than the address space", op)
	}
	var p unsafe.Pointer // C writes a pointer to memory the GC does not own
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.MallocManaged.Name, Call(d.rt.MallocManaged.Addr, uintptr(unsafe.Pointer(&p)), uintptr(size), MemAttachGlobal))
	})
	if err != nil {
		return 0, nil, err
	}
	b := unsafe.Slice((*byte)(p), int(size))
	d.hosts.Insert(hostRegion{start: addr(b), size: int(size), managed: true})
	return driver.DevicePtr(addr(b)), b, nil
}

// FreeManaged frees managed memory from MallocManaged with the synchronous
// free, on the dev thread; it leaves the pinned set first.
func (d *Driver) FreeManaged(p driver.DevicePtr) error {
	op := fmt.Sprintf("free managed %#x", uint64(p))
	if err := d.checkPtr(op, p); err != nil {
		return err
	}
	d.mu.Lock()
	_, ok := d.hosts.RemoveWhere(func(r hostRegion) bool { return r.managed && r.start == uintptr(p) })
	d.mu.Unlock()
	if !ok {
		return d.v.Errf(driver.ErrInvalidValue, "%s: not managed memory from MallocManaged, or already freed", op)
	}
	return d.dev.Do(op, func() error { return d.rt.Check(op, d.rt.Free.Name, Call(d.rt.Free.Addr, uintptr(p))) })
}

// MemLocationArg is struct cudaMemLocation {type, id} as a call passes
// it by value (CUDA 13's prefetch): 8 bytes of two ints, which the amd64
// SysV and AAPCS64 C ABIs pass in one integer register, type in the low
// 32 bits and id in the high.
func MemLocationArg(typ, id int32) uintptr {
	return uintptr(uint32(typ)) | uintptr(uint32(id))<<32
}

// PrefetchManaged queues the prefetch of [p, p+n), inside one managed
// allocation, on s: to this driver's device, or to the host. The vendor
// bound one of the two ABIs (syms.go): a device ordinal (the CPU's id for
// the host), or CUDA 13's location struct by value (MemLocationArg) and
// flags 0.
func (d *Driver) PrefetchManaged(p driver.DevicePtr, n int64, toHost bool, s driver.Stream) error {
	op := fmt.Sprintf("prefetch managed %#x (%d B)", uint64(p), n)
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	lo, hi := uintptr(p), uintptr(p)+uintptr(n)
	if n <= 0 || !d.hosts.Any(func(r hostRegion) bool {
		return r.managed && r.start <= lo && hi <= r.start+uintptr(r.size)
	}) {
		return d.v.Errf(driver.ErrInvalidValue, "%s: not inside one managed allocation", op)
	}
	if sym := d.rt.MemPrefetchLocation; sym.Addr != 0 {
		typ, id := MemLocationTypeDevice, int32(d.opts.Device)
		if toHost {
			typ, id = MemLocationTypeHost, 0
		}
		return d.rt.Check(op, sym.Name, Call(sym.Addr, lo, uintptr(n), MemLocationArg(typ, id), 0, uintptr(s)))
	}
	sym := d.rt.MemPrefetchAsync
	if sym.Addr == 0 {
		return fmt.Errorf("%w: %s: %s: the runtime lacks a prefetch call", errors.ErrUnsupported, d.v.Name, op)
	}
	dev := int32(d.opts.Device)
	if toHost {
		dev = CPUDeviceID
	}
	return d.rt.Check(op, sym.Name, Call(sym.Addr, lo, uintptr(n), uintptr(dev), uintptr(s)))
}
