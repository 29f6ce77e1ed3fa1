package plugin

import "syscall"

// childSysProcAttr makes the kernel kill the child when the forking thread
// dies (Pdeathsig, Linux only).
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
