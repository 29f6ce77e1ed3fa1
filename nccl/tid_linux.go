package nccl

import "syscall"

// gettid is the calling OS thread's id: NCCL's groups are per thread.
func gettid() int { return syscall.Gettid() }
