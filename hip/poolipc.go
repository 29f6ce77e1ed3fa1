package hip

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// Sharing a pool and its allocations with another process
// (hip_runtime_api.h, ROCm 5.2.3; the calls are marked beta there):
//
//	hipMemPoolExportToShareableHandle(void *shared_handle, hipMemPool_t mem_pool,
//	        hipMemAllocationHandleType handle_type, unsigned int flags)
//	hipMemPoolImportFromShareableHandle(hipMemPool_t *mem_pool, void *shared_handle,
//	        hipMemAllocationHandleType handle_type, unsigned int flags)
//	hipMemPoolExportPointer(hipMemPoolPtrExportData *export_data, void *dev_ptr)
//	hipMemPoolImportPointer(void **dev_ptr, hipMemPool_t mem_pool, hipMemPoolPtrExportData *export_data)
//
// The exporter opens with ipc=true (its pool created with
// hipMemHandleTypePosixFileDescriptor), sends ExportPool's file descriptor
// to the importer (over a Unix socket, or as an inherited descriptor), and
// ExportPointer's 64 bytes for each allocation from MallocAsync. The
// importer calls ImportPool once and ImportedPool.ImportPointer per
// allocation. For a POSIX descriptor the export writes an int through
// shared_handle, and the import takes the descriptor by value, cast to a
// pointer (CUDA's programming guide shows both for the CUDA calls these
// mirror). The header says the imported memory must be freed in every
// importer before the exporter frees it. All calls are device-wide and
// potentially synchronizing: they run on the dev thread; keep them out of
// captures. Checked only against the fake: not run on an AMD GPU.

// ptrExportDataSize is sizeof(hipMemPoolPtrExportData): unsigned char
// reserved[64] (hip_runtime_api.h).
const ptrExportDataSize = 64

// ExportPool is hipMemPoolExportToShareableHandle with
// hipMemHandleTypePosixFileDescriptor: a file descriptor for the driver's
// pool, for another process's ImportPool. It needs Options.IPC (the pool
// created exportable). The caller owns the descriptor.
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
		return d.rt.check(op, "hipMemPoolExportToShareableHandle",
			call(d.rt.memPoolExportToShareableHandle, uintptr(unsafe.Pointer(slot)), d.pool, memHandleTypePosixFD, 0))
	})
	if err != nil {
		return -1, err
	}
	return int(*slot), nil
}

// ExportPointer is hipMemPoolExportPointer: 64 bytes naming the pool
// allocation at p (from MallocAsync, on a pool opened with Options.IPC),
// for ImportedPool.ImportPointer in the process that imported the pool.
func (d *Driver) ExportPointer(p alloc.DevicePtr) ([]byte, error) {
	op := fmt.Sprintf("export pool pointer %#x", uint64(p))
	if d.closed.Load() {
		return nil, errClosed(op)
	}
	if p == 0 {
		return nil, errf(alloc.ErrInvalidValue, "%s: null pointer", op)
	}
	data := new([ptrExportDataSize]byte)
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "hipMemPoolExportPointer", call(d.rt.memPoolExportPointer, uintptr(unsafe.Pointer(data)), uintptr(p)))
	})
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), data[:]...), nil
}

// ImportedPool is a pool another process exported, opened in this one. It
// makes no allocations of its own ("imported memory pools do not support
// creating new allocations"); it imports the exporter's.
type ImportedPool struct {
	d      *Driver
	pool   uintptr // hipMemPool_t
	closed atomic.Bool
}

// ImportPool is hipMemPoolImportFromShareableHandle for a file descriptor
// from the exporter's ExportPool, received in this process. Close the
// pool when done; the descriptor stays the caller's.
func (d *Driver) ImportPool(fd int) (*ImportedPool, error) {
	op := fmt.Sprintf("import pool from fd %d", fd)
	if d.closed.Load() {
		return nil, errClosed(op)
	}
	if fd < 0 {
		return nil, errf(alloc.ErrInvalidValue, "%s: negative descriptor", op)
	}
	pool := new(uintptr)
	err := d.dev.do(op, func() error {
		return d.rt.check(op, "hipMemPoolImportFromShareableHandle",
			call(d.rt.memPoolImportFromShareableHandle, uintptr(unsafe.Pointer(pool)), uintptr(fd), memHandleTypePosixFD, 0))
	})
	if err != nil {
		return nil, err
	}
	return &ImportedPool{d: d, pool: *pool}, nil
}

// ImportPointer is hipMemPoolImportPointer: the address, in this process,
// of the exporter's allocation that data (ExportPointer's bytes) names.
// Free it with FreePointer before the exporter frees it.
func (ip *ImportedPool) ImportPointer(data []byte) (alloc.DevicePtr, error) {
	const op = "import pool pointer"
	if err := ip.check(op); err != nil {
		return 0, err
	}
	if len(data) != ptrExportDataSize {
		return 0, errf(alloc.ErrInvalidValue, "%s: export data is %d B, hipMemPoolPtrExportData is %d B", op, len(data), ptrExportDataSize)
	}
	buf := new([ptrExportDataSize]byte)
	copy(buf[:], data)
	p := new(uintptr)
	err := ip.d.dev.do(op, func() error {
		return ip.d.rt.check(op, "hipMemPoolImportPointer",
			call(ip.d.rt.memPoolImportPointer, uintptr(unsafe.Pointer(p)), ip.pool, uintptr(unsafe.Pointer(buf))))
	})
	if err != nil {
		return 0, err
	}
	return alloc.DevicePtr(*p), nil
}

// FreePointer releases an imported pointer (hipFree, which the header
// allows for imported memory).
func (ip *ImportedPool) FreePointer(p alloc.DevicePtr) error {
	op := fmt.Sprintf("free imported pointer %#x", uint64(p))
	if err := ip.check(op); err != nil {
		return err
	}
	if p == 0 {
		return errf(alloc.ErrInvalidValue, "%s: null pointer", op)
	}
	return ip.d.dev.do(op, func() error { return ip.d.rt.check(op, "hipFree", call(ip.d.rt.free, uintptr(p))) })
}

// Close destroys the imported pool (hipMemPoolDestroy).
func (ip *ImportedPool) Close() error {
	const op = "close imported pool"
	if ip.d.closed.Load() {
		return errClosed(op)
	}
	if !ip.closed.CompareAndSwap(false, true) {
		return errf(alloc.ErrClosed, "%s: already closed", op)
	}
	return ip.d.dev.do(op, func() error { return ip.d.rt.check(op, "hipMemPoolDestroy", call(ip.d.rt.memPoolDestroy, ip.pool)) })
}

func (ip *ImportedPool) check(op string) error {
	if ip.d.closed.Load() {
		return errClosed(op)
	}
	if ip.closed.Load() {
		return errf(alloc.ErrClosed, "%s: imported pool is closed", op)
	}
	return nil
}
