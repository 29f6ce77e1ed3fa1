package gpurt

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.HostRegisterer = (*Driver)(nil)

// HostRegister pins memory the caller owns with the host-register call,
// portable and mapped, on the dev thread, and asks its device address
// (the optional host-get-device-pointer call; 0 without it). The region
// joins the pinned set, so the async copies take it; HostFree refuses it.
func (d *Driver) HostRegister(b []byte) (driver.DevicePtr, error) {
	op := fmt.Sprintf("host register %#x (%d B)", addr(b), len(b))
	if d.closed.Load() {
		return 0, d.v.ErrClosed(op)
	}
	if len(b) == 0 {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: empty memory", op)
	}
	lo, hi := addr(b), addr(b)+uintptr(len(b))
	if slices.ContainsFunc(*d.hosts.Load(), func(r hostRegion) bool { return r.start < hi && lo < r.start+uintptr(r.size) }) {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: overlaps pinned or registered memory", op)
	}
	var dev unsafe.Pointer // a device address, never dereferenced here
	err := d.dev.Do(op, func() error {
		err := d.rt.Check(op, d.rt.HostRegister.Name, Call(d.rt.HostRegister.Addr, lo, uintptr(len(b)), d.v.HostRegisterPortable|d.v.HostRegisterMapped))
		if err != nil || d.rt.HostGetDevicePointer.Addr == 0 {
			return err
		}
		err = d.rt.Check(op, d.rt.HostGetDevicePointer.Name, Call(d.rt.HostGetDevicePointer.Addr, uintptr(unsafe.Pointer(&dev)), lo, 0))
		if err != nil {
			_ = d.rt.Check(op, d.rt.HostUnregister.Name, Call(d.rt.HostUnregister.Addr, lo))
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	d.addHost(hostRegion{start: lo, size: len(b), reg: true})
	return driver.DevicePtr(uintptr(dev)), nil
}

// HostUnregister unpins what HostRegister pinned, passed exactly as
// registered; the runtime's unregister waits for work that may use it.
func (d *Driver) HostUnregister(b []byte) error {
	op := fmt.Sprintf("host unregister %#x (%d B)", addr(b), len(b))
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	d.mu.Lock()
	rs := *d.hosts.Load()
	i := slices.IndexFunc(rs, func(r hostRegion) bool { return r.reg && len(b) > 0 && r.start == addr(b) && r.size == len(b) })
	if i < 0 {
		d.mu.Unlock()
		return d.v.Errf(driver.ErrInvalidValue, "%s: not registered", op)
	}
	rs = slices.Delete(slices.Clone(rs), i, i+1)
	d.hosts.Store(&rs)
	d.mu.Unlock()
	return d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.HostUnregister.Name, Call(d.rt.HostUnregister.Addr, addr(b)))
	})
}
