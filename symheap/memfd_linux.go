package symheap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// newSharedFile makes a memfd of size zeroed bytes.
func newSharedFile(name string, size int64) (*os.File, error) {
	// Close-on-exec: exec.Cmd.ExtraFiles hands a rank process the files
	// it is given (dup2 clears the flag on the copy); no other child, a
	// plugin backend's process say, inherits every heap of the group.
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%w: symheap: memfd_create: %v", driver.ErrBackendUnavailable, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: symheap: %d B: %v", alloc.ErrOutOfMemory, size, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

func mapShared(f *os.File, size int64) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: symheap: mmap %d B: %v", alloc.ErrOutOfMemory, size, err)
	}
	return b, nil
}

func unmapShared(b []byte) error { return unix.Munmap(b) }
