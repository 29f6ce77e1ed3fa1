package symheap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// sizeSeals fix a shared file's size: no rank process it is handed to
// can shrink it under its peers' mappings (their next access past the end
// would be SIGBUS) or grow it.
const sizeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// newSharedFile makes a memfd of size zeroed bytes, its size sealed.
func newSharedFile(name string, size int64) (*os.File, error) {
	// Close-on-exec: exec.Cmd.ExtraFiles hands a rank process the files
	// it is given (dup2 clears the flag on the copy); no other child, a
	// plugin backend's process say, inherits every heap of the group.
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("%w: symheap: memfd_create: %v", driver.ErrBackendUnavailable, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: symheap: %d B: %v", alloc.ErrOutOfMemory, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, sizeSeals|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: symheap: sealing a memfd's size: %v", driver.ErrBackendUnavailable, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// checkSealed refuses a file whose size is not sealed (not NewGroup's).
func checkSealed(f *os.File) error {
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("its seals cannot be read (not a memfd?): %v", err)
	}
	if seals&sizeSeals != sizeSeals {
		return fmt.Errorf("its size is not sealed (seals %#x)", seals)
	}
	return nil
}

func mapShared(f *os.File, size int64) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: symheap: mmap %d B: %v", alloc.ErrOutOfMemory, size, err)
	}
	return b, nil
}

func unmapShared(b []byte) error { return unix.Munmap(b) }
