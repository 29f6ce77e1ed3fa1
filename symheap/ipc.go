package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allocipc"
)

// The heap's IPC memory calls (driver.IPCMemory: export this rank's heap,
// map or unmap a peer's) go through the allocator's guard
// (internal/allocipc): refused, with no driver call made, inside captures
// that forbid an unsafe call and once a is closed, bounded by its
// watchdog, the exported buffer pinned against a racing Free or Close.
// The heap is allocated with AllocSync, never in an expandable segment, so
// it can be exported.

// exportHeap returns the IPC memory handle of b, a's AllocSync buffer.
func exportHeap(a *alloc.Allocator, b alloc.Buffer) ([]byte, error) {
	if err := hasIPC(a); err != nil {
		return nil, err
	}
	return allocipc.Export(a, b)
}

// openPeerHeap maps a peer process's heap from its handle.
func openPeerHeap(a *alloc.Allocator, handle []byte) (driver.DevicePtr, error) {
	if err := hasIPC(a); err != nil {
		return 0, err
	}
	return allocipc.Open(a, handle)
}

// closePeerHeap unmaps a heap openPeerHeap mapped.
func closePeerHeap(a *alloc.Allocator, p driver.DevicePtr) error {
	return allocipc.Close(a, p)
}

// hasIPC refuses a driver without IPC memory handles up front, with the
// heap's words.
func hasIPC(a *alloc.Allocator) error {
	if d := a.Driver(); d != nil {
		if _, ok := d.(driver.IPCMemory); !ok {
			return fmt.Errorf("%w: symheap: backend %s has no IPC memory handles", alloc.ErrInvalidValue, d.Name())
		}
	}
	return nil
}
