package gpurt

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// checkStreamSize is checkStream, then checkSize: an operation of n bytes
// on s.
func (d *Driver) checkStreamSize(op string, s driver.Stream, n int64) error {
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	return d.checkSize(op, n)
}

// memcpy enqueues the async memcpy(dst, src, n, kind, s).
func (d *Driver) memcpy(op string, dst, src uintptr, n int64, kind uintptr, s driver.Stream) error {
	if code, _ := CallHot(d.rt.MemcpyAsync.Addr, dst, src, uintptr(n), kind, uintptr(s)); code != 0 {
		return d.rt.Fail(fmt.Sprintf("%s %d B", op, n), d.rt.MemcpyAsync.Name, code)
	}
	return nil
}

func (d *Driver) CopyDtoDAsync(dst, src driver.DevicePtr, n int64, s driver.Stream) error {
	const op = "copy device to device async"
	if err := d.checkStreamSize(op, s, n); err != nil {
		return err
	}
	return d.memcpy(op, uintptr(dst), uintptr(src), n, MemcpyDeviceToDevice, s)
}

// MemsetAsync is the async memset (the int value is converted to unsigned
// char by the runtime).
func (d *Driver) MemsetAsync(dst driver.DevicePtr, value byte, n int64, s driver.Stream) error {
	const op = "memset async"
	if err := d.checkStreamSize(op, s, n); err != nil {
		return err
	}
	if code, _ := CallHot(d.rt.MemsetAsync.Addr, uintptr(dst), uintptr(value), uintptr(n), uintptr(s)); code != 0 {
		return d.rt.Fail(fmt.Sprintf("%s %d B", op, n), d.rt.MemsetAsync.Name, code)
	}
	return nil
}

// The copies between host memory and a device range, each a hostCopy:
// CopyHtoDAsync and CopyDtoHAsync take pinned memory (a captured upload
// reads src at every replay); CopyHtoD and CopyDtoH take pageable memory,
// the async memcpy on s then stream synchronize, so the buffer may be
// reused, or holds the bytes, on return (unsafe).
func (d *Driver) CopyHtoDAsync(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	return d.hostCopy("copy host to device async", uintptr(dst), src, MemcpyHostToDevice, s, true)
}
func (d *Driver) CopyDtoHAsync(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	return d.hostCopy("copy device to host async", uintptr(src), dst, MemcpyDeviceToHost, s, true)
}
func (d *Driver) CopyHtoD(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	return d.hostCopy("copy host to device", uintptr(dst), src, MemcpyHostToDevice, s, false)
}
func (d *Driver) CopyDtoH(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	return d.hostCopy("copy device to host", uintptr(src), dst, MemcpyDeviceToHost, s, false)
}

// hostCopy is a copy of kind between host memory and the device range at
// dev, on s: async from pinned memory only (pageable memory would make the
// runtime copy synchronously, and a capture record a snapshot or fail),
// else blocking from any memory. The blocking copy takes the host address
// in Call's arguments, where go:uintptrescapes keeps the buffer in place.
func (d *Driver) hostCopy(op string, dev uintptr, host []byte, kind uintptr, s driver.Stream, async bool) error {
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if len(host) == 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: empty host buffer", op)
	}
	toDevice := kind == MemcpyHostToDevice
	if async {
		if !d.pinned(host) {
			return d.v.Errf(driver.ErrInvalidValue, "%s: host memory %#x (%d B) is pageable, not from HostAlloc", op, addr(host), len(host))
		}
		if toDevice {
			return d.memcpy(op, dev, addr(host), int64(len(host)), kind, s)
		}
		return d.memcpy(op, addr(host), dev, int64(len(host)), kind, s)
	}
	err := d.blocking(op, s, func() int32 {
		if toDevice {
			return Call(d.rt.MemcpyAsync.Addr, dev, uintptr(unsafe.Pointer(&host[0])), uintptr(len(host)), kind, uintptr(s))
		}
		return Call(d.rt.MemcpyAsync.Addr, uintptr(unsafe.Pointer(&host[0])), dev, uintptr(len(host)), kind, uintptr(s))
	})
	runtime.KeepAlive(host)
	return err
}

// blocking enqueues a copy and waits for s.
func (d *Driver) blocking(op string, s driver.Stream, enqueue func() int32) error {
	if err := d.rt.Check(op, d.rt.MemcpyAsync.Name, enqueue()); err != nil {
		return err
	}
	return d.rt.Check(op, d.rt.StreamSynchronize.Name, Call(d.rt.StreamSynchronize.Addr, uintptr(s)))
}
