// Package allocipc gives the symmetric heap (and the conformance suite)
// the allocator's IPC memory calls, which package alloc keeps out of the
// engine's API: engines share memory through symheap, not through handles
// of their own. Each call goes through the allocator's guard like
// AllocSync: refused, no driver call made, inside a capture that forbids
// an unsafe call (ErrCaptureIllegalOp, or ErrCaptureInvalidated) and once
// the allocator is closed; bounded by its watchdog; the exported buffer
// pinned against a racing Free or Close. A driver without
// driver.IPCMemory is refused with ErrInvalidValue.
package allocipc

import (
	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// Calls is what package alloc installs in allochooks.IPC (alloc/ipc.go,
// ipcCalls; alloc's tests assert that it implements Calls).
type Calls interface {
	// Export returns an IPC memory handle for b, a live AllocSync buffer
	// of a. A buffer of an expandable segment is refused with
	// driver.ErrNotExportable, before any driver call.
	Export(a *alloc.Allocator, b alloc.Buffer) ([]byte, error)
	// Open maps another process's allocation from its handle; the address
	// is not a's buffer (not counted, pooled or freed by it). Abandoned by
	// the watchdog, the mapping is closed when the call returns.
	Open(a *alloc.Allocator, handle []byte) (driver.DevicePtr, error)
	// Close unmaps an address Open returned.
	Close(a *alloc.Allocator, p driver.DevicePtr) error
}

// calls is package alloc's Calls (linked by this package's import of it).
func calls() Calls { return allochooks.IPC.(Calls) }

// Export is Calls.Export of package alloc.
func Export(a *alloc.Allocator, b alloc.Buffer) ([]byte, error) { return calls().Export(a, b) }

// Open is Calls.Open of package alloc.
func Open(a *alloc.Allocator, handle []byte) (driver.DevicePtr, error) {
	return calls().Open(a, handle)
}

// Close is Calls.Close of package alloc.
func Close(a *alloc.Allocator, p driver.DevicePtr) error { return calls().Close(a, p) }
