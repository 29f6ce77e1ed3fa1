package plugin

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/capalloc/capalloc/alloc/driver"
)

// childSysProcAttr makes the kernel kill the child when the forking thread
// dies (Pdeathsig, Linux only).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pidfdOpen returns a pidfd for pid, or -1 where the kernel has none
// (before Linux 5.3, or a seccomp filter): process.alive then falls back
// to the reaper's word.
func pidfdOpen(pid int) int {
	fd, err := unix.PidfdOpen(pid, 0) // no flags: PIDFD_NONBLOCK needs Linux 5.10, and signals do not block
	if err != nil {
		return -1
	}
	unix.CloseOnExec(fd)
	return fd
}

// pidfdAlive reports whether the process behind pidfd has not been reaped:
// signal 0 to a pidfd fails with ESRCH once it has, even if its pid number
// now names another process.
func pidfdAlive(pidfd int) bool {
	return unix.PidfdSendSignal(pidfd, 0, nil, 0) == nil
}

// errUnsafeRegion is a shared region the host will not map: a file the
// backend could shrink under the mapping (a fault that would kill this
// process), or smaller than announced. Only a misbehaving backend sends one.
var errUnsafeRegion = fmt.Errorf("%w: plugin: backend's shared memory is not a sealed memfd of the announced size", driver.ErrDriver)

// checkRegionFile accepts fd (this process's, opened from the backend's)
// only if it is a regular file of at least size bytes sealed against
// shrinking: then no later act of the backend can make a mapping of its
// first size bytes fault.
func checkRegionFile(fd int, st *unix.Stat_t, size int64) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w (not a regular file: mode %#o)", errUnsafeRegion, st.Mode)
	}
	if st.Size < size {
		return fmt.Errorf("%w (%d B, announced %d B)", errUnsafeRegion, st.Size, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("%w (F_GET_SEALS: %v)", errUnsafeRegion, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("%w (not sealed against shrinking: seals %#x)", errUnsafeRegion, seals)
	}
	return nil
}
