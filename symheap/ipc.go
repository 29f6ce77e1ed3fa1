package symheap

import (
	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allocipc"
)

// The heap's IPC memory calls (driver.IPCMemory: export this rank's heap,
// map or unmap a peer's) go through the allocator's guard
// (internal/allocipc): refused, with no driver call made, inside captures
// that forbid an unsafe call and once a is closed, bounded by its
// watchdog, the exported buffer pinned against a racing Free or Close. A
// driver without IPC handles is refused when the heap is opened
// (device.go); the guard refuses it again with ErrInvalidValue. The heap
// is allocated with AllocSync, never in an expandable segment, so it can
// be exported.

// exportHeap returns the IPC memory handle of b, a's AllocSync buffer.
func exportHeap(a *alloc.Allocator, b alloc.Buffer) ([]byte, error) {
	return allocipc.Export(a, b)
}

// openPeerHeap maps a peer process's heap from its handle.
func openPeerHeap(a *alloc.Allocator, handle []byte) (driver.DevicePtr, error) {
	return allocipc.Open(a, handle)
}

// closePeerHeap unmaps a heap openPeerHeap mapped.
func closePeerHeap(a *alloc.Allocator, p driver.DevicePtr) error {
	return allocipc.Close(a, p)
}
