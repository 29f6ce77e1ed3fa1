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
	if d.closed.Load() {
		return 0, errClosed(what)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.hangLocked(what); err != nil {
		return 0, err
	}
	if err := d.refuseUnsafeLocked(what, interaction); err != nil {
		return 0, err
	}
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
	if d.closed.Load() {
		return errClosed(what)
	}
	d.mu.Lock()
	if err := d.hangLocked(what); err != nil {
		d.mu.Unlock()
		return err
	}
	if err := d.refuseUnsafeLocked(what, interaction); err != nil {
		d.mu.Unlock()
		return err
	}
	if _, ok := d.hosts.RemoveWhere(func(r hostRegion) bool {
		return r.reg && r.managed == 0 && len(b) > 0 && r.start == addr(b) && len(r.buf) == len(b)
	}); !ok {
		d.mu.Unlock()
		return errf(driver.ErrInvalidValue, "%s %#x (%d B): not registered", what, addr(b), len(b))
	}
	d.mu.Unlock()
	d.drainAll() // queued copies may still use it
	return nil
}
