package symheap

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/kernels"
)

// AllToAllV: an all-to-all whose per-peer counts live in heap memory and
// are read when the collective runs, not when it is launched, so one
// captured graph serves every routing (a mixture-of-experts step's
// dispatch and combine). Both heaps share the layout and the checks here.
//
// Layout (elements of dt; offsets are prefix sums, never passed):
//
//	sendCounts, on rank p: Ranks() int64; counts[q] elements go to rank q,
//	  taken from p's in at counts[0] + ... + counts[q-1].
//	out, on rank r: rank p's elements at the sum over q < p of what rank
//	  q sends r (rank order, packed from out's start).
//	recvCounts, on rank r: Ranks() int64, written by the collective:
//	  recvCounts[p] is what rank p sent r.
//
// Every rank reads every rank's counts after the collective's first
// barrier and checks all of them alike, so every rank reaches the same
// verdict: a negative count, a rank whose sends pass its in, or one whose
// receives pass its out fails the collective on every rank with
// ErrCountsOutOfRange, naming the first bad count in rank order; nothing
// is written (out and recvCounts keep their bytes) and the heap stays
// usable: the next AllToAllV with good counts runs.

// ErrCountsOutOfRange: an AllToAllV's counts, read when it ran, do not
// fit its buffers (a negative count, a rank's sends past its in, a rank's
// receives past its out). Reported by Synchronize on every rank, naming
// the rank and peer; nothing was written, and the heap is not broken.
var ErrCountsOutOfRange = errors.New("symheap: all-to-all counts out of range")

// CountsBytes is the size of an AllToAllV counts tensor over ranks ranks.
func CountsBytes(ranks int) int64 { return 8 * int64(ranks) }

// checkAllToAllV checks an AllToAllV's operands: in and out hold whole
// elements of dt; the counts are CountsBytes(ranks), 8-aligned; no two of
// the four overlap.
func (b *bump) checkAllToAllV(in, out, sendCounts, recvCounts Tensor, dt DType, ranks int) error {
	if err := b.checkElems(in, dt); err != nil {
		return err
	}
	if err := b.checkElems(out, dt); err != nil {
		return err
	}
	for _, c := range []Tensor{sendCounts, recvCounts} {
		if c.Size != CountsBytes(ranks) || c.Off%8 != 0 {
			return fmt.Errorf("%w: symheap: AllToAllV counts of %d B at offset %d: want %d int64 (%d B), 8-aligned",
				alloc.ErrInvalidSize, c.Size, c.Off, ranks, CountsBytes(ranks))
		}
	}
	ts := []Tensor{in, out, sendCounts, recvCounts}
	for i := range ts {
		for j := i + 1; j < len(ts); j++ {
			if err := b.disjoint(ts[i], ts[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// allToAllVSig is an AllToAllV's signature: kind, dt, in's elements.
func allToAllVSig(in Tensor, dt DType) uint32 {
	return kernels.Signature(kernels.KindAllToAllV, uint32(dt), uint64(in.Size/dt.Size()))
}

// checkCounts is the kernel's ca_counts_check: m[p*n+q] is what p sends
// q; the first bad count in rank order (Value the count, Limit the room
// its rank's in or out had left for it), or Status 0.
func checkCounts(m []int64, n int, inElems, outElems int64) kernels.CountsErr {
	for p := range n {
		var sum int64
		for q := range n {
			c := m[p*n+q]
			e := kernels.CountsErr{Sender: uint32(p), Receiver: uint32(q), Value: c, Limit: inElems - sum}
			if c < 0 {
				e.Status = kernels.CountsNegative
				return e
			}
			if c > e.Limit {
				e.Status = kernels.CountsPastSend
				return e
			}
			sum += c
		}
	}
	for r := range n {
		var sum int64
		for p := range n {
			c := m[p*n+r]
			if c > outElems-sum {
				return kernels.CountsErr{Status: kernels.CountsPastRecv, Sender: uint32(p), Receiver: uint32(r), Value: c, Limit: outElems - sum}
			}
			sum += c
		}
	}
	return kernels.CountsErr{}
}

// countsError is the ErrCountsOutOfRange rank reports for e (nil: none).
func countsError(rank int, e kernels.CountsErr) error {
	switch e.Status {
	case kernels.CountsNegative:
		return fmt.Errorf("%w: rank %d's AllToAllV: rank %d's send count for rank %d is %d", ErrCountsOutOfRange, rank, e.Sender, e.Receiver, e.Value)
	case kernels.CountsPastSend:
		return fmt.Errorf("%w: rank %d's AllToAllV: rank %d's send count for rank %d is %d, its in has room for %d more", ErrCountsOutOfRange, rank, e.Sender, e.Receiver, e.Value, e.Limit)
	case kernels.CountsPastRecv:
		return fmt.Errorf("%w: rank %d's AllToAllV: rank %d receives %d from rank %d, its out has room for %d more", ErrCountsOutOfRange, rank, e.Receiver, e.Value, e.Sender, e.Limit)
	case 0:
		return nil
	}
	return fmt.Errorf("%w: rank %d's AllToAllV: unknown counts status %d", ErrCountsOutOfRange, rank, e.Status)
}

// AllToAllV sends, from every rank p, sendCounts[q] elements of dt of
// its in to every rank q, packed in rank order into q's out, and writes
// into recvCounts what each rank sent this one (the layout above). The
// counts are read when it runs: in a captured graph, at every replay. Bad
// counts fail it on every rank with ErrCountsOutOfRange, reported by
// Synchronize; nothing is written then and the heap stays usable.
func (h *Heap) AllToAllV(in, out, sendCounts, recvCounts Tensor, dt DType) error {
	n := h.Ranks()
	if err := h.bump.checkAllToAllV(in, out, sendCounts, recvCounts, dt, n); err != nil {
		return err
	}
	es := dt.Size()
	return h.launch("AllToAllV", allToAllVSig(in, dt), func(at arrival) error {
		if err := h.barrier(at); err != nil { // every rank's in and counts written
			return err
		}
		m := make([]int64, n*n)
		for p := range n {
			b := h.peer(p, sendCounts)
			for q := range n {
				m[p*n+q] = int64(binary.LittleEndian.Uint64(b[8*q:]))
			}
		}
		bad := checkCounts(m, n, in.Size/es, out.Size/es)
		if bad.Status == 0 {
			dst, recv := h.peer(h.rank, out), h.peer(h.rank, recvCounts)
			var to int64
			for p := range n {
				var from int64
				for q := range h.rank {
					from += m[p*n+q]
				}
				c := m[p*n+h.rank]
				copy(dst[to*es:(to+c)*es], h.peer(p, in)[from*es:])
				binary.LittleEndian.PutUint64(recv[8*p:], uint64(c))
				to += c
			}
		}
		if err := h.barrier(at); err != nil { // no rank rewrites in or its counts while a peer reads them
			return err
		}
		return countsError(h.rank, bad)
	})
}
