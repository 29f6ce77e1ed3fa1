package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/kernels"
)

// Every collective checks its operands on the host when it is launched (a
// bad one is an error then, and nothing is queued), then puts one host
// function on the rank's stream. The function reads epochs and data at run
// time, so a captured collective is correct at every replay. Errors of the
// run itself (ErrCollectiveTimeout, ErrAllocMismatch) fail the stream: the
// rank's next Synchronize reports them.

// Barrier waits, in stream order, until every rank reached it.
func (h *Heap) Barrier() error {
	return h.launch("Barrier", kernels.Signature(kernels.KindBarrier, 0, 0), func(at arrival) error { return h.barrier(at) })
}

// AllReduce is AllReduceWith(t, dt, Auto).
func (h *Heap) AllReduce(t Tensor, dt DType) error { return h.AllReduceWith(t, dt, Auto) }

// AllReduceWith replaces t on every rank with the element-wise sum of t
// over all ranks, in rank order. On the host heap every algorithm is a
// reduce-scatter then an all-gather, in place: rank r sums the r-th slice
// of everyone's t into its own, then every rank copies the other reduced
// slices from their owners, so each rank adds 1/N of the elements instead
// of all of them. alg is checked and part of the signature (ranks that
// run different algorithms fail with ErrCollectiveMismatch, as on
// devices); otherwise it only matters on devices.
func (h *Heap) AllReduceWith(t Tensor, dt DType, alg Algorithm) error {
	if err := h.bump.checkAllReduce(t, dt, alg); err != nil {
		return err
	}
	return h.launch("AllReduce", allReduceSig(alg, dt, t), func(at arrival) error {
		if err := h.barrier(at); err != nil { // every input written
			return err
		}
		mine := h.slice(t, dt, h.rank)
		srcs := make([][]byte, h.Ranks())
		for p := range srcs {
			srcs[p] = h.peer(p, mine)
		}
		reduce(dt, h.peer(h.rank, mine), srcs)
		if err := h.barrier(at); err != nil { // every slice reduced
			return err
		}
		for p := range h.Ranks() {
			if p != h.rank {
				s := h.slice(t, dt, p)
				copy(h.peer(h.rank, s), h.peer(p, s))
			}
		}
		return h.barrier(at) // every peer done reading this rank's slice
	})
}

// slice is rank p's share of t's elements in AllReduce.
func (h *Heap) slice(t Tensor, dt DType, p int) Tensor {
	es := dt.Size()
	elems, n := t.Size/es, int64(h.Ranks())
	lo, hi := elems*int64(p)/n, elems*int64(p+1)/n
	return Tensor{Off: t.Off + es*lo, Size: es * (hi - lo)}
}

// AllGather is AllGatherWith(in, out, Auto).
func (h *Heap) AllGather(in, out Tensor) error { return h.AllGatherWith(in, out, Auto) }

// AllGatherWith writes rank p's in at out's p-th chunk, on every rank:
// out.Size must be Ranks()*in.Size. On the host heap every algorithm is
// the host function's copy (the cpu driver's copies reach only its own
// allocations, not the group's shared mappings); alg is checked and part
// of the signature, as on devices, where Auto is the kernels here.
func (h *Heap) AllGatherWith(in, out Tensor, alg Algorithm) error {
	if err := h.bump.checkAllGather(in, out, h.Ranks(), alg); err != nil {
		return err
	}
	sig := copySig(kernels.KindAllGather, resolveCopy(alg, out.Size, NoCopyEngine), uint64(in.Size))
	return h.launch("AllGather", sig, func(at arrival) error {
		if err := h.barrier(at); err != nil {
			return err
		}
		dst := h.peer(h.rank, out)
		for p := range h.Ranks() {
			copy(dst[int64(p)*in.Size:], h.peer(p, in))
		}
		return h.barrier(at) // no rank rewrites in while a peer reads it
	})
}

// ReduceScatter writes into out, on rank r, the sum over ranks of their
// in's r-th chunk: in.Size must be Ranks()*out.Size.
func (h *Heap) ReduceScatter(in, out Tensor, dt DType) error {
	if err := h.bump.checkReduceScatter(in, out, dt, h.Ranks()); err != nil {
		return err
	}
	return h.launch("ReduceScatter", kernels.Signature(kernels.KindReduceScatter, uint32(dt), uint64(out.Size/dt.Size())), func(at arrival) error {
		if err := h.barrier(at); err != nil {
			return err
		}
		chunk := Tensor{Off: in.Off + int64(h.rank)*out.Size, Size: out.Size}
		srcs := make([][]byte, h.Ranks())
		for p := range srcs {
			srcs[p] = h.peer(p, chunk)
		}
		reduce(dt, h.peer(h.rank, out), srcs)
		return h.barrier(at)
	})
}

// AllToAll is AllToAllWith(in, out, Auto).
func (h *Heap) AllToAll(in, out Tensor) error { return h.AllToAllWith(in, out, Auto) }

// AllToAllWith writes into out's p-th chunk, on rank r, rank p's in's
// r-th chunk: in.Size and out.Size must be equal and divisible by
// Ranks(). alg as in AllGatherWith.
func (h *Heap) AllToAllWith(in, out Tensor, alg Algorithm) error {
	if err := h.bump.checkAllToAll(in, out, h.Ranks(), alg); err != nil {
		return err
	}
	n := in.Size / int64(h.Ranks())
	sig := copySig(kernels.KindAllToAll, resolveCopy(alg, in.Size, NoCopyEngine), uint64(n))
	return h.launch("AllToAll", sig, func(at arrival) error {
		if err := h.barrier(at); err != nil {
			return err
		}
		dst := h.peer(h.rank, out)
		for p := range h.Ranks() {
			copy(dst[int64(p)*n:], h.peer(p, Tensor{Off: in.Off + int64(h.rank)*n, Size: n}))
		}
		return h.barrier(at)
	})
}

// launch puts fn on the rank's stream with the allocation hash as of now
// and the collective's signature, which its barriers carry (0 for local
// work, which meets no peer). It is refused
// on a closed heap; a run after Close fails the stream with
// alloc.ErrClosed.
func (h *Heap) launch(op string, sig uint32, fn func(at arrival) error) error {
	h.life.RLock()
	closed := h.closed
	h.life.RUnlock()
	if closed {
		return fmt.Errorf("%w: symheap: %s on the closed heap of rank %d", alloc.ErrClosed, op, h.rank)
	}
	if err := h.Err(); err != nil {
		return fmt.Errorf("symheap: %s on the broken heap of rank %d: %w", op, h.rank, err)
	}
	at := arrival{hash: h.bump.sum(), sig: sig}
	err := h.a.LaunchHostFunc(func() error {
		h.life.RLock()
		defer h.life.RUnlock()
		if h.closed {
			return fmt.Errorf("%w: symheap: %s ran after the heap of rank %d was closed", alloc.ErrClosed, op, h.rank)
		}
		return fn(at)
	})
	if err != nil {
		return fmt.Errorf("symheap: %s: %w", op, err)
	}
	return nil
}
