package symheap

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// DefaultTimeout bounds every wait of a collective when Options.Timeout is
// zero.
const DefaultTimeout = 10 * time.Second

// Align is the alignment of every Tensor's offset.
const Align = 256

// Options configures a rank's heap.
type Options struct {
	// Timeout bounds each wait for peers (0: DefaultTimeout). Past it the
	// collective fails with ErrCollectiveTimeout.
	Timeout time.Duration
	// CheckAllocs hashes this rank's allocation sequence and compares it
	// with every peer's at each barrier (ErrAllocMismatch).
	CheckAllocs bool
}

// Tensor names bytes of the heap by offset: the same Tensor is the same
// bytes' place on every rank (pointers differ; offsets do not).
type Tensor struct {
	Off, Size int64 // bytes, like alloc.Buffer's Size

	group uint64 // the group whose heap allocated it (0: written as a literal)
}

// Heap is one rank's view of the group: every rank's heap mapped here, and
// this rank's allocator, on whose stream its collectives run.
type Heap struct {
	g     *Group
	rank  int
	a     *alloc.Allocator
	opts  Options
	views [][]byte // views[p]: rank p's file (pad, then heap) as mapped here

	bump bump // allocation; its hash is for CheckAllocs

	err atomic.Pointer[error] // sticky: the first collective failure

	// life keeps Close from unmapping under a running collective: a
	// collective's host function holds the read side while it runs, and
	// one that runs after Close (queued, or in a graph replayed later)
	// fails with alloc.ErrClosed instead of touching unmapped memory.
	life   sync.RWMutex
	closed bool

	admitted bool // counted in g.serialized (guarded by g.mu)
}

// Open maps every rank's heap for rank, whose collectives will run on a's
// stream. a's driver must launch host functions (driver.HostFuncLauncher)
// and share memory with the host (DeviceInfo.UnifiedMemory: cpu; GB10's
// GPU reaches host memory too); otherwise the error wraps
// errors.ErrUnsupported.
// Opening during a capture on a is refused with driver.ErrCaptureIllegalOp
// before any driver call: the peer table is built once, here, never in a
// graph.
func (g *Group) Open(rank int, a *alloc.Allocator, opts Options) (*Heap, error) {
	if rank < 0 || rank >= g.Ranks() || a == nil {
		return nil, fmt.Errorf("%w: symheap: rank %d of %d", alloc.ErrInvalidValue, rank, g.Ranks())
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("%w: symheap: negative timeout %v (0 means DefaultTimeout)", alloc.ErrInvalidValue, opts.Timeout)
	}
	st, err := a.CaptureStatus()
	if err != nil {
		return nil, err
	}
	if st != alloc.StateNone {
		return nil, fmt.Errorf("%w: symheap: opening a heap during a capture (state %s): open it before capturing", driver.ErrCaptureIllegalOp, st)
	}
	if !Runs(a.Driver()) {
		return nil, fmt.Errorf("%w: symheap: backend %s (collectives need host functions and host-addressable device memory: cpu)", errors.ErrUnsupported, a.Driver().Name())
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	h := &Heap{g: g, rank: rank, a: a, opts: opts, bump: newBump(g.size, groupID(g))}
	if err := g.admit(h); err != nil {
		return nil, err
	}
	for _, f := range g.files {
		b, err := mapShared(f, padSize+g.size)
		if err != nil {
			_ = h.unmap()
			g.leave(h)
			return nil, err
		}
		h.views = append(h.views, b)
	}
	// The table is in place before anything is captured: queued work ends.
	if err := a.Synchronize(); err != nil {
		_ = h.unmap()
		g.leave(h)
		return nil, err
	}
	return h, nil
}

// OneRankPerProcess says whether ranks on d must each run in a process of
// their own, which Open enforces by refusing a second rank of a group in
// the same process. True for cuda: CUDA documents that host functions
// "without a mandated order (such as in independent streams) execute in
// undefined order and may be serialized", so one rank's barrier could wait
// for a peer's host function queued behind it on the runtime's thread,
// until the timeout. (HIP documents that host functions of different
// non-blocking streams can run concurrently; the cpu backend runs each
// stream's in the goroutine that synchronizes it.)
func OneRankPerProcess(d driver.Driver) bool { return d.Name() == "cuda" }

// admit records h's rank as open in this process, refusing a second rank
// of the group on drivers that may serialize host functions: such ranks
// must be processes (Attach), each with its own runtime.
func (g *Group) admit(h *Heap) error {
	if !OneRankPerProcess(h.a.Driver()) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for r := range g.serialized {
		if r != h.rank {
			return fmt.Errorf("%w: symheap: rank %d on %s in the process that already runs rank %d: its runtime may run the host functions of both ranks on one thread, so a barrier would wait for a peer queued behind it; run each rank in its own process (Group.Files, Attach)",
				errors.ErrUnsupported, h.rank, h.a.Driver().Name(), r)
		}
	}
	if g.serialized == nil {
		g.serialized = map[int]bool{}
	}
	g.serialized[h.rank] = true
	h.admitted = true
	return nil
}

// leave forgets h's rank (Close, or an Open that failed).
func (g *Group) leave(h *Heap) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if h.admitted {
		delete(g.serialized, h.rank)
		h.admitted = false
	}
}

// Runs reports whether collectives run on d: it launches host functions
// and shares memory with the host.
func Runs(d driver.Driver) bool {
	_, ok := d.(driver.HostFuncLauncher)
	return ok && d.Info().UnifiedMemory
}

// Close unmaps the peers' heaps. It waits for a collective running on
// the stream to finish (at most Options.Timeout); collectives that run
// later, still queued or in a graph replayed after Close, fail with
// alloc.ErrClosed (reported by the stream's next synchronize) without
// touching the heap. Close graphs that run this heap's collectives first.
// A second Close fails with alloc.ErrClosed.
func (h *Heap) Close() error {
	h.life.Lock()
	defer h.life.Unlock()
	if h.closed {
		return fmt.Errorf("%w: symheap: heap of rank %d closed twice", alloc.ErrClosed, h.rank)
	}
	h.closed = true
	h.g.leave(h)
	return h.unmap()
}

func (h *Heap) unmap() error {
	var errs []error
	for _, b := range h.views {
		errs = append(errs, unmapShared(b))
	}
	h.views = nil
	return errors.Join(errs...)
}

// Rank is this heap's rank; Ranks the group's size.
func (h *Heap) Rank() int  { return h.rank }
func (h *Heap) Ranks() int { return h.g.Ranks() }

// Allocator is the allocator whose stream runs this rank's collectives.
func (h *Heap) Allocator() *alloc.Allocator { return h.a }

// Alloc takes n bytes (aligned to Align) from the heap: a bump of the
// offset, host arithmetic only, legal during a capture. Every rank must
// allocate the same sizes in the same order.
func (h *Heap) Alloc(n int64) (Tensor, error) { return h.bump.alloc(n) }

// Reset frees the whole heap: the next Alloc starts at offset 0. It is
// refused during a capture (driver.ErrCaptureIllegalOp): graphs have the
// offsets baked in. Every rank must reset together.
func (h *Heap) Reset() error { return h.bump.reset(h.a) }

// Bytes is this rank's bytes of t, for the engine's host functions; nil
// once the heap is closed, or for a tensor outside the heap.
func (h *Heap) Bytes(t Tensor) []byte {
	if h.check(t) != nil {
		return nil
	}
	h.life.RLock()
	defer h.life.RUnlock()
	if h.closed {
		return nil
	}
	return h.peer(h.rank, t)
}

// Float32s and Int32s view this rank's bytes of t as elements.
func (h *Heap) Float32s(t Tensor) []float32 { return elems[float32](h.Bytes(t)) }
func (h *Heap) Int32s(t Tensor) []int32     { return elems[int32](h.Bytes(t)) }

// peer is rank p's bytes of t, as mapped here.
func (h *Heap) peer(p int, t Tensor) []byte {
	return h.views[p][padSize+t.Off : padSize+t.Off+t.Size : padSize+t.Off+t.Size]
}

func (h *Heap) check(t Tensor) error { return h.bump.check(t) }

// Err is the heap's sticky failure (a timed-out or mismatched collective),
// nil while it is healthy.
func (h *Heap) Err() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *Heap) fail(err error) error {
	h.err.CompareAndSwap(nil, &err)
	return h.Err()
}
