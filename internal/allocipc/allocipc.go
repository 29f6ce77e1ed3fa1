// Package allocipc gives the symmetric heap (and the conformance suite)
// an allocator's IPC memory calls without package alloc exporting them:
// engines do not call them, but a call that may block on the driver must
// still go through the allocator's guard (refused inside captures, bounded
// by the watchdog, its buffer pinned against a racing Free or Close).
// Package alloc's init sets every variable; they are nil only in a program
// that does not link alloc.
package allocipc

import "github.com/capalloc/capalloc/alloc/driver"

var (
	// Export returns an IPC memory handle for b, a live AllocSync buffer
	// (alloc.Buffer) of allocator a (*alloc.Allocator): refused, no driver
	// call made, where an unsafe call is (ErrCaptureIllegalOp, or
	// ErrCaptureInvalidated), for a buffer of an expandable segment
	// (driver.ErrNotExportable), and with ErrInvalidValue when the driver
	// has no driver.IPCMemory.
	Export func(a, b any) ([]byte, error)
	// Open maps another process's allocation from its handle; the address
	// is not a's buffer (not counted, pooled or freed by it). Guarded like
	// Export; abandoned by the watchdog, the mapping is closed when the
	// call returns.
	Open func(a any, handle []byte) (driver.DevicePtr, error)
	// Close unmaps an address Open returned. Guarded like Export.
	Close func(a any, p driver.DevicePtr) error
)
