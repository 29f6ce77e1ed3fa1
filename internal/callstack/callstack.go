// Package callstack records the calling goroutine's stack as return
// addresses, for the device memory profile (alloc's sampling), cheaply
// enough to run on an allocation path: on amd64 and arm64, whose Go frames
// always keep a frame pointer, it follows the frame-pointer chain (about
// 16 ns for eight frames where runtime.Callers takes 700 ns, measured in
// BENCHMARKS.md); elsewhere it is runtime.Callers.
//
// The addresses are return PCs, as runtime.Callers gives: expand them with
// runtime.CallersFrames, which also restores inlined calls.
package callstack

// Callers fills pcs with the return addresses of the calling goroutine's
// stack, starting skip frames above the caller of Callers (skip 0: the
// first address is inside the function that called Callers), and returns
// how many it wrote.
//
//go:noinline
func Callers(skip int, pcs []uintptr) int {
	return callers(skip, pcs)
}
