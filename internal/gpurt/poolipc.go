package gpurt

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Sharing a pool and its allocations with another process (the pool
// export/import calls, whose signatures each vendor's poolipc.go cites).
// The exporter opens with ipc=true (its pool created with the POSIX file
// descriptor handle type), sends ExportPool's file descriptor (over a Unix
// socket, or as an inherited descriptor) and ExportPointer's 64 bytes per
// allocation from MallocAsync; the importer calls ImportPool once and
// ImportedPool.ImportPointer per allocation. For a POSIX descriptor the
// export writes an int through the shareable-handle pointer, and the
// import takes the descriptor by value, cast to a pointer (CUDA's
// programming guide: "Note that the handle is passed by value here"). The
// imported memory must be freed in every importer before the exporter
// frees it. All calls are device-wide and potentially synchronizing: they
// run on the dev thread; keep them out of captures. Checked only against
// the fakes: not run on a GPU yet.

// ExportPool is the pool export to a shareable handle of the POSIX file
// descriptor type: a file descriptor for the driver's pool, for another
// process's ImportPool. It needs Options.IPC (the pool created
// exportable). The caller owns the descriptor.
func (d *Driver) ExportPool() (fd int, err error) {
	const op = "export pool"
	if d.closed.Load() {
		return -1, d.v.ErrClosed(op)
	}
	if !d.opts.IPC {
		return -1, d.v.Errf(driver.ErrInvalidValue, "%s: the pool was not created exportable (open with ipc=true)", op)
	}
	slot := new(int32) // the shareable handle of a POSIX fd handle type is an int
	err = d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.MemPoolExportToShareableHandle.Name,
			Call(d.rt.MemPoolExportToShareableHandle.Addr, uintptr(unsafe.Pointer(slot)), d.pool, uintptr(MemHandleTypePosixFD), 0))
	})
	if err != nil {
		return -1, err
	}
	return int(*slot), nil
}

// ExportPointer is the pool export-pointer call: 64 bytes naming the pool
// allocation at p (from MallocAsync, on a pool opened with Options.IPC),
// for ImportedPool.ImportPointer in the process that imported the pool.
func (d *Driver) ExportPointer(p driver.DevicePtr) ([]byte, error) {
	op := fmt.Sprintf("export pool pointer %#x", uint64(p))
	if err := d.checkPtr(op, p); err != nil {
		return nil, err
	}
	data := new([PtrExportDataSize]byte)
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.MemPoolExportPointer.Name, Call(d.rt.MemPoolExportPointer.Addr, uintptr(unsafe.Pointer(data)), uintptr(p)))
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
	pool   uintptr
	closed atomic.Bool
}

// ImportPool is the pool import from a shareable handle, for a file
// descriptor from the exporter's ExportPool, received in this process.
// Close the pool when done; the descriptor stays the caller's.
func (d *Driver) ImportPool(fd int) (*ImportedPool, error) {
	op := fmt.Sprintf("import pool from fd %d", fd)
	if d.closed.Load() {
		return nil, d.v.ErrClosed(op)
	}
	if fd < 0 {
		return nil, d.v.Errf(driver.ErrInvalidValue, "%s: negative descriptor", op)
	}
	pool := new(uintptr)
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.MemPoolImportFromShareableHandle.Name,
			Call(d.rt.MemPoolImportFromShareableHandle.Addr, uintptr(unsafe.Pointer(pool)), uintptr(fd), uintptr(MemHandleTypePosixFD), 0))
	})
	if err != nil {
		return nil, err
	}
	return &ImportedPool{d: d, pool: *pool}, nil
}

// ImportPointer is the pool import-pointer call: the address, in this
// process, of the exporter's allocation that data (ExportPointer's bytes)
// names. Free it with FreePointer before the exporter frees it.
func (ip *ImportedPool) ImportPointer(data []byte) (driver.DevicePtr, error) {
	const op = "import pool pointer"
	d := ip.d
	if err := ip.check(op); err != nil {
		return 0, err
	}
	if len(data) != PtrExportDataSize {
		return 0, d.v.Errf(driver.ErrInvalidValue, "%s: export data is %d B, %s is %d B", op, len(data), d.v.PtrExportDataType, PtrExportDataSize)
	}
	buf := new([PtrExportDataSize]byte)
	copy(buf[:], data)
	p := new(uintptr)
	err := d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.MemPoolImportPointer.Name,
			Call(d.rt.MemPoolImportPointer.Addr, uintptr(unsafe.Pointer(p)), ip.pool, uintptr(unsafe.Pointer(buf))))
	})
	if err != nil {
		return 0, err
	}
	return driver.DevicePtr(*p), nil
}

// FreePointer releases an imported pointer (the synchronous free, which
// both runtimes allow for imported memory).
func (ip *ImportedPool) FreePointer(p driver.DevicePtr) error {
	op := fmt.Sprintf("free imported pointer %#x", uint64(p))
	d := ip.d
	if err := ip.check(op); err != nil {
		return err
	}
	if err := d.nonNull(op, uintptr(p), "pointer"); err != nil {
		return err
	}
	return d.dev.Do(op, func() error { return d.rt.Check(op, d.rt.Free.Name, Call(d.rt.Free.Addr, uintptr(p))) })
}

// Close destroys the imported pool (the pool destroy call).
func (ip *ImportedPool) Close() error {
	const op = "close imported pool"
	d := ip.d
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	if !ip.closed.CompareAndSwap(false, true) {
		return d.v.Errf(driver.ErrClosed, "%s: already closed", op)
	}
	return d.dev.Do(op, func() error { return d.rt.Check(op, d.rt.MemPoolDestroy.Name, Call(d.rt.MemPoolDestroy.Addr, ip.pool)) })
}

func (ip *ImportedPool) check(op string) error {
	if ip.d.closed.Load() {
		return ip.d.v.ErrClosed(op)
	}
	if ip.closed.Load() {
		return ip.d.v.Errf(driver.ErrClosed, "%s: imported pool is closed", op)
	}
	return nil
}
