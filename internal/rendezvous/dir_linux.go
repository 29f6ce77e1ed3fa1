package rendezvous

import (
	"os"
	"syscall"
	"unsafe"
)

// On Linux every file of a Dir is reached through the directory's
// descriptor (openat, linkat, renameat, unlinkat, faccessat): a path is
// never looked up again after the directory was checked.

// atSymlinkNofollow is AT_SYMLINK_NOFOLLOW (linux/fcntl.h), which package
// syscall does not export.
const atSymlinkNofollow = 0x100

func openDir(path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

func (d *Dir) fd() int { return int(d.f.Fd()) }

func (d *Dir) open(name string, flag int, perm uint32) (*os.File, error) {
	fd, err := syscall.Openat(d.fd(), name, flag|syscall.O_CLOEXEC, perm)
	if err != nil {
		return nil, &os.PathError{Op: "openat", Path: d.join(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.join(name)), nil
}

func (d *Dir) exists(name string) bool {
	return syscall.Faccessat(d.fd(), name, 0, atSymlinkNofollow) == nil
}

// link is linkat(2), which package syscall does not export.
func (d *Dir) link(old, name string) error {
	op, err := syscall.BytePtrFromString(old)
	if err != nil {
		return err
	}
	np, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	fd := uintptr(d.fd())
	_, _, errno := syscall.Syscall6(syscall.SYS_LINKAT, fd, uintptr(unsafe.Pointer(op)), fd, uintptr(unsafe.Pointer(np)), 0, 0)
	if errno != 0 {
		return &os.LinkError{Op: "linkat", Old: d.join(old), New: d.join(name), Err: errno}
	}
	return nil
}

func (d *Dir) rename(old, name string) error {
	if err := syscall.Renameat(d.fd(), old, d.fd(), name); err != nil {
		return &os.LinkError{Op: "renameat", Old: d.join(old), New: d.join(name), Err: err}
	}
	return nil
}

func (d *Dir) remove(name string) error {
	if err := syscall.Unlinkat(d.fd(), name); err != nil {
		return &os.PathError{Op: "unlinkat", Path: d.join(name), Err: err}
	}
	return nil
}
