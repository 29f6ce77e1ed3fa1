//go:build amd64 || arm64

package callstack

import "unsafe"

// getfp returns the frame pointer of its caller (fp_amd64.s, fp_arm64.s).
func getfp() unsafe.Pointer

const (
	ptrSize = unsafe.Sizeof(uintptr(0))
	// maxFrame bounds one frame: the compiler moves larger variables to
	// the heap, so a longer step is not a Go frame.
	maxFrame = 1 << 20
)

// callers walks the frame-pointer chain: in every Go frame the word at
// the frame pointer is the caller's frame pointer, and the word above it
// the return address (the layout the runtime's own frame-pointer unwinder
// relies on, runtime.fpTracebackPCs). Frame pointers grow towards the
// stack's top, each step less than maxFrame; a chain that breaks that
// rule has left Go frames (a callback entered from C through assembly that
// keeps no frame pointer) and the walk stops there rather than read a
// foreign value as an address.
//
// It calls nothing that could grow, and so move, the stack while it holds
// addresses in it.
//
//go:noinline
//go:nosplit
//go:norace
//go:nocheckptr
func callers(skip int, pcs []uintptr) int {
	fp := getfp() // callers' frame: its return address is in Callers
	skip++        // Callers' own frame
	n := 0
	for fp != nil && n < len(pcs) {
		pc := *(*uintptr)(unsafe.Add(fp, ptrSize))
		next := *(*unsafe.Pointer)(fp)
		if skip > 0 {
			skip--
		} else {
			pcs[n] = pc
			n++
		}
		if d := uintptr(next) - uintptr(fp); next != nil && (d == 0 || d > maxFrame || uintptr(next)%ptrSize != 0) {
			break // uintptr arithmetic: next below fp wraps to a huge d
		}
		fp = next
	}
	return n
}
