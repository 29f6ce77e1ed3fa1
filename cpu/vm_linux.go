package cpu

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc/driver"
)

// vmSupported: Linux has memfd_create, so reservations can be backed chunk
// by chunk.
const vmSupported = true

// vmReserve maps size bytes of inaccessible address space: no memory, no
// commit charge (MAP_NORESERVE), a fault on any access. The driver only
// touches the parts it has mapped since.
func vmReserve(size int64) ([]byte, error) {
	p, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, vmErr(err, "reserving %d B of address space", size)
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// vmMap backs b, a part of a reservation, with a new memfd of its size,
// shared and read-write. The memory is allocated here (fallocate), so a
// host out of memory fails this call rather than a later access, and it
// starts zeroed. The descriptor is closed at once: the mapping keeps the
// file alive, and unmapping it frees the memory.
func vmMap(b []byte) error {
	size := int64(len(b))
	fd, err := unix.MemfdCreate("capalloc-vm", unix.MFD_CLOEXEC)
	if err != nil {
		return vmErr(err, "memfd_create")
	}
	defer unix.Close(fd)
	if err := unix.Fallocate(fd, 0, 0, size); err != nil {
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return vmErr(err, "allocating a %d B memfd", size)
		}
		if err := unix.Ftruncate(fd, size); err != nil {
			return vmErr(err, "sizing a %d B memfd", size)
		}
	}
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(unsafe.SliceData(b)), uintptr(size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		// A failed MAP_FIXED may have unmapped the range: reserve it again
		// so nothing else is placed there.
		_ = vmUnmap(b)
		return vmErr(err, "mapping %d B into the reservation", size)
	}
	return nil
}

// vmUnmap makes b inaccessible again: an anonymous PROT_NONE mapping
// replaces the chunk's, which frees its memory and keeps the address space
// reserved.
func vmUnmap(b []byte) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	if err != nil {
		return vmErr(err, "unmapping %d B", len(b))
	}
	return nil
}

// vmRelease gives a whole reservation back, chunks still mapped in it
// included (Close).
func vmRelease(b []byte) error {
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b))); err != nil {
		return vmErr(err, "releasing a %d B reservation", len(b))
	}
	return nil
}

// vmErr types an OS failure: no memory (or no address space) is
// ErrOutOfMemory, anything else ErrDriver.
func vmErr(err error, format string, args ...any) error {
	sentinel := driver.ErrDriver
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ENOSPC) {
		sentinel = driver.ErrOutOfMemory
	}
	return fmt.Errorf("%w: cpu: %s: %w", sentinel, fmt.Sprintf(format, args...), err)
}
