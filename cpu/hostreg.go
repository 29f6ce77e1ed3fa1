package cpu

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.HostRegisterer = (*Driver)(nil)

// HostRegister pins memory the caller owns (cudaHostRegister with the
// mapped flag): the async copies take it from now on. The device is the
// host, so its device address is its own. Unsafe, as HostAlloc.
func (d *Driver) HostRegister(b []byte) (driver.DevicePtr, error) {
	return d.hostRegister(b, driver.Global)
}

func (d *Driver) hostRegister(b []byte, interaction driver.CaptureMode) (driver.DevicePtr, error) {
	const what = "host register"
	if err := d.lockHostCall(what, interaction); err != nil {
		return 0, err
	}
	defer d.mu.Unlock()
	if len(b) == 0 {
		return 0, errf(driver.ErrInvalidValue, "%s: empty memory", what)
	}
	if d.hosts.Overlaps(b) {
		return 0, errf(driver.ErrInvalidValue, "%s %#x (%d B): overlaps pinned or registered memory", what, addr(b), len(b))
	}
	d.hosts.Insert(hostRegion{start: addr(b), buf: b, reg: true})
	return driver.DevicePtr(addr(b)), nil
}

// HostUnregister unpins what HostRegister pinned, passed exactly as
// registered, once queued work that may use it is done.
func (d *Driver) HostUnregister(b []byte) error { return d.hostUnregister(b, driver.Global) }

func (d *Driver) hostUnregister(b []byte, interaction driver.CaptureMode) error {
	const what = "host unregister"
	if err := d.lockHostCall(what, interaction); err != nil {
		return err
	}
	if _, ok := d.removeHostLocked(b, true); !ok {
		d.mu.Unlock()
		return errf(driver.ErrInvalidValue, "%s %#x (%d B): not registered", what, addr(b), len(b))
	}
	d.mu.Unlock()
	d.drainAll() // queued copies may still use it
	return nil
}
