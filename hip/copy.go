package hip

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// memcpy enqueues hipMemcpyAsync(dst, src, n, kind, s).
func (d *Driver) memcpy(op string, dst, src uintptr, n int64, kind uintptr, s alloc.Stream) error {
	if code, _ := callHot(d.rt.memcpyAsync, dst, src, uintptr(n), kind, uintptr(s)); code != 0 {
		return d.rt.fail(fmt.Sprintf("%s %d B", op, n), "hipMemcpyAsync", code)
	}
	return nil
}

func (d *Driver) requirePinned(op string, b []byte) error {
	if len(b) == 0 {
		return errf(alloc.ErrInvalidValue, "%s: empty host buffer", op)
	}
	if !d.pinned(b) {
		return errf(alloc.ErrInvalidValue, "%s: host memory %#x (%d B) is pageable, not from HostAlloc", op, addr(b), len(b))
	}
	return nil
}

// CopyHtoDAsync copies from pinned memory; a captured copy reads src at
// every replay.
func (d *Driver) CopyHtoDAsync(dst alloc.DevicePtr, src []byte, s alloc.Stream) error {
	const op = "copy host to device async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.requirePinned(op, src); err != nil {
		return err
	}
	return d.memcpy(op, uintptr(dst), addr(src), int64(len(src)), memcpyHostToDevice, s)
}

func (d *Driver) CopyDtoHAsync(dst []byte, src alloc.DevicePtr, s alloc.Stream) error {
	const op = "copy device to host async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := d.requirePinned(op, dst); err != nil {
		return err
	}
	return d.memcpy(op, addr(dst), uintptr(src), int64(len(dst)), memcpyDeviceToHost, s)
}

func (d *Driver) CopyDtoDAsync(dst, src alloc.DevicePtr, n int64, s alloc.Stream) error {
	const op = "copy device to device async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := checkSize(op, n); err != nil {
		return err
	}
	return d.memcpy(op, uintptr(dst), uintptr(src), n, memcpyDeviceToDevice, s)
}

// MemsetAsync is hipMemsetAsync (the int value is converted to unsigned
// char by the runtime).
func (d *Driver) MemsetAsync(dst alloc.DevicePtr, value byte, n int64, s alloc.Stream) error {
	const op = "memset async"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if err := checkSize(op, n); err != nil {
		return err
	}
	if code, _ := callHot(d.rt.memsetAsync, uintptr(dst), uintptr(value), uintptr(n), uintptr(s)); code != 0 {
		return d.rt.fail(fmt.Sprintf("%s %d B", op, n), "hipMemsetAsync", code)
	}
	return nil
}

// CopyHtoD takes pageable memory: hipMemcpyAsync on s, then
// hipStreamSynchronize, so src may be reused on return. Unsafe.
func (d *Driver) CopyHtoD(dst alloc.DevicePtr, src []byte, s alloc.Stream) error {
	const op = "copy host to device"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if len(src) == 0 {
		return errf(alloc.ErrInvalidValue, "%s: empty host buffer", op)
	}
	err := d.blocking(op, s, func() int32 {
		return call(d.rt.memcpyAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), memcpyHostToDevice, uintptr(s))
	})
	runtime.KeepAlive(src)
	return err
}

// CopyDtoH fills pageable dst and returns once it holds the bytes. Unsafe.
func (d *Driver) CopyDtoH(dst []byte, src alloc.DevicePtr, s alloc.Stream) error {
	const op = "copy device to host"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	if len(dst) == 0 {
		return errf(alloc.ErrInvalidValue, "%s: empty host buffer", op)
	}
	err := d.blocking(op, s, func() int32 {
		return call(d.rt.memcpyAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), memcpyDeviceToHost, uintptr(s))
	})
	runtime.KeepAlive(dst)
	return err
}

// blocking enqueues a copy and waits for s.
func (d *Driver) blocking(op string, s alloc.Stream, enqueue func() int32) error {
	if err := d.rt.check(op, "hipMemcpyAsync", enqueue()); err != nil {
		return err
	}
	return d.rt.check(op, "hipStreamSynchronize", call(d.rt.streamSynchronize, uintptr(s)))
}
