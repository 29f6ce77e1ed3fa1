package cuda

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// IPC memory handles: device memory another process can open
// (alloc.IPCMemory), as in the hip package. Sharing a pool and its
// allocations is poolipc.go.
//
// cudaIpcGetMemHandle exports a device allocation made with cudaMalloc
// (its documentation: "a pointer to the base of an existing device memory
// allocation previously allocated with cudaMalloc"), so the handle is for
// allocations from Malloc (alloc's AllocSync), at their base; pool
// allocations are exported with cudaMemPoolExportPointer (poolipc.go). All calls are device-wide and
// potentially synchronizing: they run on the dev thread, and alloc's
// Allocator methods keep them out of captures.

// IPCGetMemHandle is cudaIpcGetMemHandle: the 64-byte handle of the
// allocation at p, which must be the base of a Malloc allocation.
func (d *Driver) IPCGetMemHandle(p alloc.DevicePtr) ([]byte, error) {
	op := fmt.Sprintf("IPC get handle of %#x", uint64(p))
	if d.closed.Load() {
		return nil, errClosed(op)
	}
	if p == 0 {
		return nil, errf(alloc.ErrInvalidValue, "%s: null pointer", op)
	}
	h := new(ipcMemHandle)
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "cudaIpcGetMemHandle", call(d.rt.ipcGetMemHandle, uintptr(unsafe.Pointer(h)), uintptr(p)))
	})
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), h.reserved[:]...), nil
}

// IPCOpenMemHandle is cudaIpcOpenMemHandle, which takes the handle by value
// (a 64-byte struct: purego passes it as the platform's C ABI does).
func (d *Driver) IPCOpenMemHandle(handle []byte) (alloc.DevicePtr, error) {
	const op = "IPC open handle"
	if d.closed.Load() {
		return 0, errClosed(op)
	}
	if len(handle) != ipcHandleSize {
		return 0, errf(alloc.ErrInvalidValue, "%s: handle is %d B, cudaIpcMemHandle_t is %d B", op, len(handle), ipcHandleSize)
	}
	var h ipcMemHandle
	copy(h.reserved[:], handle)
	var p uintptr
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "cudaIpcOpenMemHandle", d.rt.ipcOpen(&p, h, ipcLazyEnablePeerAccess))
	})
	if err != nil {
		return 0, err
	}
	return alloc.DevicePtr(p), nil
}

// IPCCloseMemHandle is cudaIpcCloseMemHandle, for an address
// IPCOpenMemHandle returned.
func (d *Driver) IPCCloseMemHandle(p alloc.DevicePtr) error {
	op := fmt.Sprintf("IPC close handle %#x", uint64(p))
	if d.closed.Load() {
		return errClosed(op)
	}
	if p == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null pointer", op)
	}
	return d.dev.do(op, func() error {
		return d.rt.check(op, "cudaIpcCloseMemHandle", call(d.rt.ipcCloseMemHandle, uintptr(p)))
	})
}
