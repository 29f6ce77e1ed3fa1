package gpurt

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Where the device sits among others: how many blocks of a kernel one
// multiprocessor holds (driver.KernelLauncher's MaxActiveBlocks), the
// device's PCI bus id (driver.Module.DeviceID) and peer access between
// the devices of this process (driver.PeerAccess). Every call here is
// optional in both runtimes: without the occupancy call MaxActiveBlocks
// and without the peer calls CanAccessPeer and EnablePeerAccess fail with
// errors.ErrUnsupported; without the bus id call DeviceID is "".

// pciBusIDLen bounds the bus id string: "dddd:bb:dd.f" is 12 characters
// and a NUL (both runtimes' references show this form; NVIDIA's asks for
// len of at least 13).
const pciBusIDLen = 64

// pciBusID is the device's PCI bus id, "" when the runtime cannot say. It
// runs on the dev thread.
func (d *Driver) pciBusID() string {
	s := d.rt.DeviceGetPCIBusId
	if s.Addr == 0 {
		return ""
	}
	buf := make([]byte, pciBusIDLen)
	if Call(s.Addr, uintptr(unsafe.Pointer(&buf[0])), pciBusIDLen, uintptr(d.opts.Device)) != 0 {
		return ""
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i])
		}
	}
	return ""
}

// MaxActiveBlocks is driver.KernelLauncher's: blocks of k at block threads
// (no dynamic shared memory) one multiprocessor holds at once, from the
// runtime's occupancy call made on the dev thread with the module's state
// current. A kernel not from this driver's LoadModule, or a block of 0 or
// over the device's maximum, is driver.ErrInvalidValue before any call.
func (d *Driver) MaxActiveBlocks(k driver.Kernel, block uint32) (int, error) {
	op := fmt.Sprintf("occupancy of kernel %#x at %d threads a block", uint64(k), block)
	if d.closed.Load() {
		return 0, d.v.ErrClosed(op)
	}
	info, ok := (*d.kernels.Load())[k]
	if !ok {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: unknown kernel (not from this driver's LoadModule)", op)
	}
	if block == 0 || block > info.maxThreads {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: blocks are 1 to %d threads", op, info.maxThreads)
	}
	api := d.kapi.Load()
	if api.Occupancy.Addr == 0 {
		return 0, d.v.Errf(errors.ErrUnsupported, "%s: the runtime has no %s", op, api.Occupancy.Name)
	}
	var n int32
	err := d.dev.Do(op, func() error {
		if err := api.Check(op, api.SetCurrent.Name, Call(api.SetCurrent.Addr, api.Current)); err != nil {
			return err
		}
		return api.Check(op, api.Occupancy.Name, Call(api.Occupancy.Addr, uintptr(unsafe.Pointer(&n)), uintptr(k), uintptr(block), 0))
	})
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, d.v.Errf(driver.ErrDriver, "%s: %s reported %d blocks", op, api.Occupancy.Name, n)
	}
	return int(n), nil
}

// Device is driver.PeerAccess's: the driver's device ordinal.
func (d *Driver) Device() int { return d.opts.Device }

// CanAccessPeer is driver.PeerAccess's: whether this device's kernels can
// reach peer's memory once peer access is enabled (a query, on the dev
// thread). The same device is true without a call.
func (d *Driver) CanAccessPeer(peer int) (bool, error) {
	op := fmt.Sprintf("can device %d access peer device %d", d.opts.Device, peer)
	if err := d.peerCheck(op, d.rt.DeviceCanAccessPeer, peer); err != nil || peer == d.opts.Device {
		return err == nil, err
	}
	var can int32
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.DeviceCanAccessPeer.Name,
			Call(d.rt.DeviceCanAccessPeer.Addr, uintptr(unsafe.Pointer(&can)), uintptr(d.opts.Device), uintptr(peer)))
	})
	return err == nil && can != 0, err
}

// EnablePeerAccess is driver.PeerAccess's: makes peer's memory reachable
// from this device (device-wide: under the domain's guard, on the dev
// thread, where this device is current). Already enabled is success; the
// same device is a no-op.
func (d *Driver) EnablePeerAccess(peer int) error {
	op := fmt.Sprintf("enable peer access from device %d to device %d", d.opts.Device, peer)
	if err := d.peerCheck(op, d.rt.DeviceEnablePeerAccess, peer); err != nil || peer == d.opts.Device {
		return err
	}
	return driver.DeviceWide(d.v.Name, d.v.Name+": "+op, func() error {
		return d.dev.Do(op, func() error {
			code := Call(d.rt.DeviceEnablePeerAccess.Addr, uintptr(peer), 0) // flags: reserved, 0
			if code == CodePeerAccessAlreadyEnabled {
				return nil
			}
			return d.rt.Check(op, d.rt.DeviceEnablePeerAccess.Name, code)
		})
	})
}

// peerCheck refuses a closed driver, a missing call and a negative peer
// before any call.
func (d *Driver) peerCheck(op string, s Sym, peer int) error {
	switch {
	case d.closed.Load():
		return d.v.ErrClosed(op)
	case peer < 0:
		return d.v.Errf(driver.ErrInvalidValue, "%s: negative device ordinal", op)
	case s.Addr == 0:
		return d.v.Errf(errors.ErrUnsupported, "%s: the runtime has no %s", op, s.Name)
	}
	return nil
}
