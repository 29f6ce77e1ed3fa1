package gpurt

import (
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Call invokes a C function returning the runtime's error code (a C int or
// enum: the upper half of the register is garbage). go:uintptrescapes
// keeps the objects behind uintptr(unsafe.Pointer(p)) arguments alive and
// in place (moved to the heap) for the duration of the call, as for
// SyscallN.
//
//go:uintptrescapes
func Call(fn uintptr, args ...uintptr) int32 {
	r1, _, _ := purego.SyscallN(fn, args...)
	return int32(r1)
}

// OutArg, in CallHot's arguments, stands for a pointer to the frame's
// 8-byte result slot (a C out-parameter).
const OutArg = ^uintptr(0)

// frame is a pooled argument block for CallHot: up to 11 arguments, the
// kernel launch's count.
type frame struct {
	args [11]uintptr
	out  uint64
}

var frames = sync.Pool{New: func() any { return new(frame) }}

// CallHot is Call without allocating, for the calls made per operation
// (the stream capture status before every pool hit; the async allocs,
// frees, copies, memsets, graph and kernel launches). Call's directive
// (go:uintptrescapes) moves each pointed-to Go local, and the variadic
// slice, to the heap at every call; here the slice handed to SyscallN is
// the pooled frame's array and an out-parameter is the frame's slot
// (OutArg), so the call allocates nothing. The price: CallHot must not be
// given a pointer to a Go stack variable, only OutArg, device addresses,
// C memory (pinned host memory) or heap memory the caller keeps alive (a
// []byte that came through the Driver interface has escaped to the heap).
// Heap objects never move.
func CallHot(fn uintptr, args ...uintptr) (code int32, out uint64) {
	f := frames.Get().(*frame)
	f.out = 0
	n := copy(f.args[:], args)
	for i := range n {
		if f.args[i] == OutArg {
			f.args[i] = uintptr(unsafe.Pointer(&f.out))
		}
	}
	r1, _, _ := purego.SyscallN(fn, f.args[:n]...)
	out = f.out
	frames.Put(f)
	return int32(r1), out
}

// First is CallHot's code, for calls without an out-parameter.
func First(code int32, _ uint64) int32 { return code }
