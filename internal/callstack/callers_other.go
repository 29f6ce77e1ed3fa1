//go:build !amd64 && !arm64

package callstack

import "runtime"

func callers(skip int, pcs []uintptr) int {
	return runtime.Callers(skip+3, pcs) // runtime.Callers, callers, Callers
}
