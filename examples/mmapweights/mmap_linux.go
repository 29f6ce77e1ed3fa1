//go:build linux

package main

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the n bytes of the file at path, shared and writable:
// writes through the mapping are the file's bytes.
func mapFile(path string, n int) (m []byte, unmap func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	m, err = syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return m, func() error { return syscall.Munmap(m) }, nil
}
