//go:build !linux

package nccl

// gettid: no thread id here (NCCL is Linux-only); groups are refused.
func gettid() int { return -1 }
