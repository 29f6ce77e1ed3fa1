package symheap

import (
	"fmt"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// bump is a heap's allocation, shared by the host-memory heap (Heap) and
// the device heap (DeviceHeap): an offset bumped by each Alloc (aligned
// to Align), host arithmetic only, so legal in a capture and the same on
// every rank for the same sequence; and an FNV-1a hash of the sizes
// (Options.CheckAllocs).
type bump struct {
	size  int64  // heap bytes
	group uint64 // stamped on every Tensor (groupID)

	mu   sync.Mutex
	next int64  // bump offset
	hash uint32 // FNV-1a of the allocation sizes
}

func newBump(size int64, group uint64) bump { return bump{size: size, group: group, hash: fnvOffset} }

// alloc takes n bytes.
func (b *bump) alloc(n int64) (Tensor, error) {
	if n <= 0 {
		return Tensor{}, fmt.Errorf("%w: symheap: alloc %d B", alloc.ErrInvalidSize, n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	off := (b.next + Align - 1) &^ (Align - 1)
	if off > b.size || n > b.size-off {
		return Tensor{}, fmt.Errorf("%w: %d B at offset %d of a %d B heap", ErrHeapFull, n, off, b.size)
	}
	b.next = off + n
	b.hash = fnv32(b.hash, uint64(n))
	return Tensor{Off: off, Size: n, group: b.group}, nil
}

// reset frees everything: refused during a capture on a (graphs have the
// offsets baked in).
func (b *bump) reset(a *alloc.Allocator) error {
	st, err := a.CaptureStatus()
	if err != nil {
		return err
	}
	if st != alloc.StateNone {
		return fmt.Errorf("%w: symheap: reset during a capture (state %s)", driver.ErrCaptureIllegalOp, st)
	}
	b.mu.Lock()
	b.next, b.hash = 0, fnvOffset
	b.mu.Unlock()
	return nil
}

// sum is the allocation hash as of now.
func (b *bump) sum() uint32 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hash
}

// check refuses a tensor outside the heap.
func (b *bump) check(t Tensor) error {
	if t.Off < 0 || t.Size <= 0 || t.Off > b.size || t.Size > b.size-t.Off {
		return fmt.Errorf("%w: symheap: tensor [%d, %d+%d) outside a %d B heap", alloc.ErrOutOfRange, t.Off, t.Off, t.Size, b.size)
	}
	if t.group != 0 && t.group != b.group {
		return fmt.Errorf("%w: symheap: tensor [%d, %d+%d) was allocated by another group's heap", alloc.ErrInvalidValue, t.Off, t.Off, t.Size)
	}
	return nil
}

const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
)

func fnv32(h uint32, v uint64) uint32 {
	for range 8 {
		h ^= uint32(v & 0xff)
		h *= fnvPrime
		v >>= 8
	}
	return h
}
