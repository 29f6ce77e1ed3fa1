package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
)

// DType is the element type of a reduction.
type DType int

const (
	Float32 DType = iota
	Int32
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int32:
		return "int32"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Every collective checks its operands on the host when it is launched (a
// bad one is an error then, and nothing is queued), then puts one host
// function on the rank's stream. The function reads epochs and data at run
// time, so a captured collective is correct at every replay. Errors of the
// run itself (ErrCollectiveTimeout, ErrAllocMismatch) fail the stream: the
// rank's next Synchronize reports them.

// Barrier waits, in stream order, until every rank reached it.
func (h *Heap) Barrier() error {
	return h.launch("Barrier", func(hash uint32) error { return h.barrier(hash) })
}

// AllReduce replaces t on every rank with the element-wise sum of t over
// all ranks. It is a reduce-scatter then an all-gather, in place: rank r
// sums the r-th slice of everyone's t into its own, then every rank copies
// the other reduced slices from their owners, so each rank adds 1/N of the
// elements instead of all of them.
func (h *Heap) AllReduce(t Tensor, dt DType) error {
	if err := h.checkElems(t, dt); err != nil {
		return err
	}
	return h.launch("AllReduce", func(hash uint32) error {
		if err := h.barrier(hash); err != nil { // every input written
			return err
		}
		mine := h.slice(t, h.rank)
		for p := range h.Ranks() {
			if p != h.rank {
				add(dt, h.peer(h.rank, mine), h.peer(p, mine))
			}
		}
		if err := h.barrier(hash); err != nil { // every slice reduced
			return err
		}
		for p := range h.Ranks() {
			if p != h.rank {
				s := h.slice(t, p)
				copy(h.peer(h.rank, s), h.peer(p, s))
			}
		}
		return h.barrier(hash) // every peer done reading this rank's slice
	})
}

// slice is rank p's share of t's elements (4 bytes each) in AllReduce.
func (h *Heap) slice(t Tensor, p int) Tensor {
	elems, n := t.Size/4, int64(h.Ranks())
	lo, hi := elems*int64(p)/n, elems*int64(p+1)/n
	return Tensor{Off: t.Off + 4*lo, Size: 4 * (hi - lo)}
}

// AllGather writes rank p's in at out's p-th chunk, on every rank:
// out.Size must be Ranks()*in.Size.
func (h *Heap) AllGather(in, out Tensor) error {
	if err := h.checkChunks(out, in); err != nil {
		return err
	}
	return h.launch("AllGather", func(hash uint32) error {
		if err := h.barrier(hash); err != nil {
			return err
		}
		dst := h.peer(h.rank, out)
		for p := range h.Ranks() {
			copy(dst[int64(p)*in.Size:], h.peer(p, in))
		}
		return h.barrier(hash) // no rank rewrites in while a peer reads it
	})
}

// ReduceScatter writes into out, on rank r, the sum over ranks of their
// in's r-th chunk: in.Size must be Ranks()*out.Size.
func (h *Heap) ReduceScatter(in, out Tensor, dt DType) error {
	if err := h.checkChunks(in, out); err != nil {
		return err
	}
	if err := h.checkElems(out, dt); err != nil {
		return err
	}
	return h.launch("ReduceScatter", func(hash uint32) error {
		if err := h.barrier(hash); err != nil {
			return err
		}
		chunk := Tensor{Off: in.Off + int64(h.rank)*out.Size, Size: out.Size}
		dst := h.peer(h.rank, out)
		copy(dst, h.peer(0, chunk))
		for p := 1; p < h.Ranks(); p++ {
			add(dt, dst, h.peer(p, chunk))
		}
		return h.barrier(hash)
	})
}

// AllToAll writes into out's p-th chunk, on rank r, rank p's in's r-th
// chunk: in.Size and out.Size must be equal and divisible by Ranks().
func (h *Heap) AllToAll(in, out Tensor) error {
	if in.Size != out.Size || in.Size%int64(h.Ranks()) != 0 {
		return fmt.Errorf("%w: symheap: all-to-all of %d B into %d B over %d ranks", alloc.ErrInvalidSize, in.Size, out.Size, h.Ranks())
	}
	if err := h.disjoint(in, out); err != nil {
		return err
	}
	n := in.Size / int64(h.Ranks())
	return h.launch("AllToAll", func(hash uint32) error {
		if err := h.barrier(hash); err != nil {
			return err
		}
		dst := h.peer(h.rank, out)
		for p := range h.Ranks() {
			copy(dst[int64(p)*n:], h.peer(p, Tensor{Off: in.Off + int64(h.rank)*n, Size: n}))
		}
		return h.barrier(hash)
	})
}

// launch puts fn on the rank's stream with the allocation hash as of now.
// It is refused on a closed heap; a run after Close fails the stream with
// alloc.ErrClosed.
func (h *Heap) launch(op string, fn func(hash uint32) error) error {
	h.life.RLock()
	closed := h.closed
	h.life.RUnlock()
	if closed {
		return fmt.Errorf("%w: symheap: %s on the closed heap of rank %d", alloc.ErrClosed, op, h.rank)
	}
	hash := h.bump.sum()
	err := h.a.LaunchHostFunc(func() error {
		h.life.RLock()
		defer h.life.RUnlock()
		if h.closed {
			return fmt.Errorf("%w: symheap: %s ran after the heap of rank %d was closed", alloc.ErrClosed, op, h.rank)
		}
		return fn(hash)
	})
	if err != nil {
		return fmt.Errorf("symheap: %s: %w", op, err)
	}
	return nil
}

func (h *Heap) checkElems(t Tensor, dt DType) error {
	if err := h.check(t); err != nil {
		return err
	}
	if dt != Float32 && dt != Int32 {
		return fmt.Errorf("%w: symheap: element type %v", alloc.ErrInvalidValue, dt)
	}
	if t.Size%4 != 0 {
		return fmt.Errorf("%w: symheap: %d B is not a whole number of %v", alloc.ErrInvalidSize, t.Size, dt)
	}
	return nil
}

// checkChunks checks that whole holds Ranks() chunks of part's size, and
// that both are in the heap and do not overlap.
func (h *Heap) checkChunks(whole, part Tensor) error {
	if whole.Size != int64(h.Ranks())*part.Size {
		return fmt.Errorf("%w: symheap: %d B is not %d chunks of %d B", alloc.ErrInvalidSize, whole.Size, h.Ranks(), part.Size)
	}
	return h.disjoint(whole, part)
}

func (h *Heap) disjoint(a, b Tensor) error {
	if err := h.check(a); err != nil {
		return err
	}
	if err := h.check(b); err != nil {
		return err
	}
	if a.Off < b.Off+b.Size && b.Off < a.Off+a.Size {
		return fmt.Errorf("%w: symheap: tensors [%d, +%d) and [%d, +%d) overlap", alloc.ErrInvalidValue, a.Off, a.Size, b.Off, b.Size)
	}
	return nil
}

// add adds src into dst element-wise.
func add(dt DType, dst, src []byte) {
	switch dt {
	case Float32:
		addElems(asElems[float32](dst), asElems[float32](src))
	case Int32:
		addElems(asElems[int32](dst), asElems[int32](src))
	}
}

func addElems[T float32 | int32](dst, src []T) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
