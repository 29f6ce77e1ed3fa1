package symheap

import (
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc"
)

// Collectives is one rank's symmetric heap as engine code uses it: the
// same methods on every backend, so a step written against it runs
// unchanged on cpu (Heap: host functions on the rank's stream) and on
// cuda and hip (DeviceHeap: this library's kernels). Every method but the
// allocation and the accessors puts work on the rank's allocator stream:
// made at once outside a capture, recorded by a capture, run again at
// every replay on the bytes as they are then.
//
// Bad input is refused with a typed error and nothing is enqueued: a
// tensor outside the heap (alloc.ErrOutOfRange) or of another group's
// heap, a dtype, size or algorithm that does not fit
// (alloc.ErrInvalidValue, alloc.ErrInvalidSize), a closed heap
// (alloc.ErrClosed), a broken one (its ErrCollectiveTimeout,
// ErrCollectiveMismatch, ErrAllocMismatch, or a device heap's
// ErrPeerClosed).
type Collectives interface {
	Rank() int
	Ranks() int
	// Allocator is the allocator whose stream runs this rank's work.
	Allocator() *alloc.Allocator
	// Alloc and Reset: the deterministic bump (Heap.Alloc).
	Alloc(n int64) (Tensor, error)
	Reset() error

	Barrier() error
	// AllReduce is AllReduceWith(t, dt, Auto).
	AllReduce(t Tensor, dt DType) error
	// AllReduceWith replaces t on every rank with the element-wise sum
	// over ranks, summed in rank order (every rank gets the same bits).
	AllReduceWith(t Tensor, dt DType, alg Algorithm) error
	// AllGatherWith and AllToAllWith are AllGather and AllToAll by alg:
	// Auto, Kernel, or CopyEngine (the device's copy engines move the
	// bytes between barrier kernels; copyengine.go).
	AllGatherWith(in, out Tensor, alg Algorithm) error
	AllToAllWith(in, out Tensor, alg Algorithm) error
	// AllGather writes rank p's in at out's p-th chunk, on every rank.
	AllGather(in, out Tensor) error
	// ReduceScatter writes into out, on rank r, the sum over ranks of
	// their in's r-th chunk.
	ReduceScatter(in, out Tensor, dt DType) error
	// AllToAll writes into out's p-th chunk, on rank r, rank p's in's
	// r-th chunk.
	AllToAll(in, out Tensor) error
	// AllToAllV sends sendCounts[q] elements of rank p's in to every
	// rank q, packed in rank order into q's out, and writes into
	// recvCounts what each rank sent; the counts are read when it runs
	// (every replay), so one graph serves every routing (alltoallv.go).
	AllToAllV(in, out, sendCounts, recvCounts Tensor, dt DType) error

	// Put copies this rank's src into peer's dst. Signal adds value to
	// peer's signal slot (after the Puts queued before it landed);
	// WaitSignal waits until this rank's slot received value more than
	// the waits on it before consumed, then consumes it, so a captured
	// step signals and waits once per replay with no reset. A wait past
	// the timeout breaks the heap with ErrCollectiveTimeout. None of them
	// is a collective: ranks may queue different numbers of them.
	Put(peer int, dst, src Tensor) error
	Signal(peer, slot int, value uint32) error
	WaitSignal(slot int, value uint32) error

	// Write copies dst.Size bytes from src at srcOff into this rank's
	// dst; Read copies src into dst at dstOff. Pinned host memory, so a
	// replay moves the bytes as they are then.
	Write(dst Tensor, src *alloc.HostBuffer, srcOff int64) error
	Read(dst *alloc.HostBuffer, dstOff int64, src Tensor) error
	// CopyLocal copies src into dst within this rank's heap.
	CopyLocal(dst, src Tensor) error
	// Axpy computes y = a*x + y over float32 elements of this rank's
	// heap: the local work of the examples and tests.
	Axpy(y, x Tensor, a float32) error

	// Synchronize waits for the rank's stream and reports the heap's
	// failure: a collective that timed out (ErrCollectiveTimeout, naming
	// ranks and epochs), met a peer in another collective
	// (ErrCollectiveMismatch, naming both), found mismatched
	// allocations, or (device heap) stopped because a peer closed its
	// heap (ErrPeerClosed). From then on the
	// heap is broken: Err returns the failure and every collective is
	// refused with it.
	Synchronize() error
	Err() error
	Close() error
}

var (
	_ Collectives = (*Heap)(nil)
	_ Collectives = (*DeviceHeap)(nil)
)

// groupIDs gives every group (a Group, or a device heap's Exchange) a
// number, which its heaps stamp on their tensors: a tensor allocated by
// another group's heap is refused, a tensor written as a literal is
// checked by its range only.
var (
	groupIDs  sync.Map // group key -> uint64
	nextGroup atomic.Uint64
)

func groupID(key any) uint64 {
	if v, ok := groupIDs.Load(key); ok {
		return v.(uint64)
	}
	v, _ := groupIDs.LoadOrStore(key, nextGroup.Add(1))
	return v.(uint64)
}
