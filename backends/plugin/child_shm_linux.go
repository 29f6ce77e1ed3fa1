package plugin

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// newRegion creates and maps a sealed memfd of size bytes.
func newRegion(id uint64, size int64) (*region, error) {
	fd, err := unix.MemfdCreate("capalloc-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ftruncate memfd to %d B: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sealing memfd: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fstat memfd: %w", err)
	}
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap %d B: %w", size, err)
	}
	return &region{id: id, fd: fd, ino: st.Ino, buf: b}, nil
}
