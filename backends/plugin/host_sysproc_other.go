//go:build !linux

package plugin

import "syscall"

// childSysProcAttr: no Pdeathsig outside Linux (plugin mode is refused
// there before a child is started).
func childSysProcAttr() *syscall.SysProcAttr { return nil }
