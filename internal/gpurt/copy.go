package gpurt

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// memcpy enqueues the async memcpy(dst, src, n, kind, s).
func (d *Driver) memcpy(op string, dst, src uintptr, n int64, kind uintptr, s driver.Stream) error {
	if code, _ := CallHot(d.rt.MemcpyAsync.Addr, dst, src, uintptr(n), kind, uintptr(s)); code != 0 {
		return d.rt.Fail(fmt.Sprintf("%s %d B", op, n), d.rt.MemcpyAsync.Name, code)
	}
	return nil
}

func (d *Driver) requirePinned(op string, b []byte) error {
	if len(b) == 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: empty host buffer", op)
	}
	if !d.pinned(b) {
		return d.v.Errf(driver.ErrInvalidValue, "%s: host memory %#x (%d B) is pageable, not from HostAlloc", op, addr(b), len(b))
	}
	return nil
}

// CopyHtoDAsync copies from pinned memory; a captured copy reads src at
// every replay.
func (d *Driver) CopyHtoDAsync(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	const op = "copy host to device async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.requirePinned(op, src); err != nil {
		return err
	}
	return d.memcpy(op, uintptr(dst), addr(src), int64(len(src)), MemcpyHostToDevice, s)
}

func (d *Driver) CopyDtoHAsync(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	const op = "copy device to host async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.requirePinned(op, dst); err != nil {
		return err
	}
	return d.memcpy(op, addr(dst), uintptr(src), int64(len(dst)), MemcpyDeviceToHost, s)
}

func (d *Driver) CopyDtoDAsync(dst, src driver.DevicePtr, n int64, s driver.Stream) error {
	const op = "copy device to device async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.checkSize(op, n); err != nil {
		return err
	}
	return d.memcpy(op, uintptr(dst), uintptr(src), n, MemcpyDeviceToDevice, s)
}

// MemsetAsync is the async memset (the int value is converted to unsigned
// char by the runtime).
func (d *Driver) MemsetAsync(dst driver.DevicePtr, value byte, n int64, s driver.Stream) error {
	const op = "memset async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.checkSize(op, n); err != nil {
		return err
	}
	if code, _ := CallHot(d.rt.MemsetAsync.Addr, uintptr(dst), uintptr(value), uintptr(n), uintptr(s)); code != 0 {
		return d.rt.Fail(fmt.Sprintf("%s %d B", op, n), d.rt.MemsetAsync.Name, code)
	}
	return nil
}

// CopyHtoD takes pageable memory: the async memcpy on s, then stream
// synchronize, so src may be reused on return. Unsafe.
func (d *Driver) CopyHtoD(dst driver.DevicePtr, src []byte, s driver.Stream) error {
	const op = "copy host to device"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if len(src) == 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: empty host buffer", op)
	}
	err := d.blocking(op, s, func() int32 {
		return Call(d.rt.MemcpyAsync.Addr, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), MemcpyHostToDevice, uintptr(s))
	})
	runtime.KeepAlive(src)
	return err
}

// CopyDtoH fills pageable dst and returns once it holds the bytes. Unsafe.
func (d *Driver) CopyDtoH(dst []byte, src driver.DevicePtr, s driver.Stream) error {
	const op = "copy device to host"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if len(dst) == 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: empty host buffer", op)
	}
	err := d.blocking(op, s, func() int32 {
		return Call(d.rt.MemcpyAsync.Addr, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), MemcpyDeviceToHost, uintptr(s))
	})
	runtime.KeepAlive(dst)
	return err
}

// blocking enqueues a copy and waits for s.
func (d *Driver) blocking(op string, s driver.Stream, enqueue func() int32) error {
	if err := d.rt.Check(op, d.rt.MemcpyAsync.Name, enqueue()); err != nil {
		return err
	}
	return d.rt.Check(op, d.rt.StreamSynchronize.Name, Call(d.rt.StreamSynchronize.Addr, uintptr(s)))
}
