package gpurt

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// IPC memory handles: device memory another process can open
// (driver.IPCMemory). Sharing a pool and its allocations is poolipc.go.
//
// The get-handle call exports a device allocation made with the
// synchronous malloc (CUDA's documentation: "a pointer to the base of an
// existing device memory allocation previously allocated with cudaMalloc";
// HIP's header: "created with hipMalloc"), so the handle is for
// allocations from Malloc (alloc's AllocSync), at their base; pool
// allocations are exported with the pool export-pointer call
// (poolipc.go). All calls are device-wide and potentially synchronizing:
// they run on the dev thread, and alloc's Allocator methods keep them out
// of captures.

// IPCGetMemHandle is the IPC get-handle call: the 64-byte handle of the
// allocation at p, which must be the base of a Malloc allocation.
func (d *Driver) IPCGetMemHandle(p driver.DevicePtr) ([]byte, error) {
	op := fmt.Sprintf("IPC get handle of %#x", uint64(p))
	if err := d.checkPtr(op, p); err != nil {
		return nil, err
	}
	h := new(IPCMemHandle)
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.IPCGetMemHandle.Name, Call(d.rt.IPCGetMemHandle.Addr, uintptr(unsafe.Pointer(h)), uintptr(p)))
	})
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), h.Reserved[:]...), nil
}

// IPCOpenMemHandle is the IPC open call, which takes the handle by value
// (a 64-byte struct: purego passes it as the platform's C ABI does), with
// the runtime's lazy-peer-access flag.
func (d *Driver) IPCOpenMemHandle(handle []byte) (driver.DevicePtr, error) {
	const op = "IPC open handle"
	if d.closed.Load() {
		return 0, d.v.ErrClosed(op)
	}
	if len(handle) != IPCHandleSize {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: handle is %d B, %s is %d B", op, len(handle), d.v.IPCHandleType, IPCHandleSize)
	}
	var h IPCMemHandle
	copy(h.Reserved[:], handle)
	var p uintptr
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.IPCOpenMemHandle.Name, d.rt.IPCOpen(&p, h, d.rt.IPCOpenFlags))
	})
	if err != nil {
		return 0, err
	}
	return driver.DevicePtr(p), nil
}

// IPCCloseMemHandle is the IPC close call, for an address
// IPCOpenMemHandle returned.
func (d *Driver) IPCCloseMemHandle(p driver.DevicePtr) error {
	op := fmt.Sprintf("IPC close handle %#x", uint64(p))
	if err := d.checkPtr(op, p); err != nil {
		return err
	}
	return d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.IPCCloseMemHandle.Name, Call(d.rt.IPCCloseMemHandle.Addr, uintptr(p)))
	})
}
