package cuda

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// IPC: device memory another process can open (alloc.IPCMemory), and an
// exportable pool. The same design as the hip package's.
//
// cudaIpcGetMemHandle exports a device allocation made with cudaMalloc
// (its documentation: "a pointer to the base of an existing device memory
// allocation previously allocated with cudaMalloc"), so the handle is for
// allocations from Malloc (alloc's AllocSync), at their base; pool
// allocations are exported with cudaMemPoolExportPointer from a pool
// exported by ExportPool (not bound yet). All calls are device-wide and
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

// ExportPool is cudaMemPoolExportToShareableHandle with
// cudaMemHandleTypePosixFileDescriptor: a file descriptor for the driver's
// pool, to pass to another process (over a Unix socket), which imports it
// with cudaMemPoolImportFromShareableHandle. It needs Options.IPC (the pool
// created exportable). The caller owns the descriptor. Device-wide: keep
// it out of captures.
func (d *Driver) ExportPool() (fd int, err error) {
	const op = "export pool"
	if d.closed.Load() {
		return -1, errClosed(op)
	}
	if !d.opts.IPC {
		return -1, errf(alloc.ErrInvalidValue, "%s: the pool was not created exportable (open with ipc=true)", op)
	}
	slot := new(int32) // the shareable handle of a POSIX fd handle type is an int
	err = d.dev.do(op, func() error {
		return d.rt.check(op, "cudaMemPoolExportToShareableHandle",
			call(d.rt.memPoolExportToShareableHandle, uintptr(unsafe.Pointer(slot)), d.pool, memHandleTypePosixFD, 0))
	})
	if err != nil {
		return -1, err
	}
	return int(*slot), nil
}
