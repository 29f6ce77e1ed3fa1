package hip

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// IPC memory handles: device memory another process can open
// (alloc.IPCMemory). Sharing a pool and its allocations is poolipc.go.
//
// hipIpcGetMemHandle exports "an existing device memory allocation created
// with hipMalloc" (hip_runtime_api.h), so the handle is for allocations
// from Malloc (alloc's AllocSync), at their base; pool allocations are not
// exportable this way (that is hipMemPoolExportPointer's job: poolipc.go).
// All calls are device-wide and potentially synchronizing: they run on the
// dev thread, and alloc's Allocator methods keep them out of captures.

// ipcOpenFlags is hipIpcMemLazyEnablePeerAccess, which hipIpcOpenMemHandle's
// flags "must be specified as": 0 in ROCm 5.x's header (5.2.3:
// "#define hipIpcMemLazyEnablePeerAccess 0"), 1 from ROCm 6.0 on.
func (rt *runtimeAPI) ipcOpenFlags() uint32 {
	if rt.runtimeVersion >= version6 {
		return ipcLazyEnablePeerAccessFrom6
	}
	return ipcLazyEnablePeerAccessBefore6
}

// IPCGetMemHandle is hipIpcGetMemHandle: the 64-byte handle of the
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
		return d.rt.check(op, "hipIpcGetMemHandle", call(d.rt.ipcGetMemHandle, uintptr(unsafe.Pointer(h)), uintptr(p)))
	})
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), h.reserved[:]...), nil
}

// IPCOpenMemHandle is hipIpcOpenMemHandle, which takes the handle by value
// (a 64-byte struct: purego passes it as the platform's C ABI does).
func (d *Driver) IPCOpenMemHandle(handle []byte) (alloc.DevicePtr, error) {
	const op = "IPC open handle"
	if d.closed.Load() {
		return 0, errClosed(op)
	}
	if len(handle) != ipcHandleSize {
		return 0, errf(alloc.ErrInvalidValue, "%s: handle is %d B, hipIpcMemHandle_t is %d B", op, len(handle), ipcHandleSize)
	}
	var h ipcMemHandle
	copy(h.reserved[:], handle)
	var p uintptr
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "hipIpcOpenMemHandle", d.rt.ipcOpen(&p, h, d.rt.ipcOpenFlags()))
	})
	if err != nil {
		return 0, err
	}
	return alloc.DevicePtr(p), nil
}

// IPCCloseMemHandle is hipIpcCloseMemHandle, for an address
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
		return d.rt.check(op, "hipIpcCloseMemHandle", call(d.rt.ipcCloseMemHandle, uintptr(p)))
	})
}
