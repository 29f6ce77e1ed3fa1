package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// putSignal: point-to-point on the heap (Put, Signal, WaitSignal), on
// both heap kinds. Three ranks in a ring: each puts its input, a chunk
// per signal slot, into the next rank's output and signals that slot with
// k+1; each waits on every slot of its own for k+1 and reads its output,
// which must be the previous rank's input. Run eagerly, then captured
// once per rank and replayed with fresh inputs: the slots count across
// replays, nothing is reset. Then one rank waits once more, for a signal
// nobody sends: ErrCollectiveTimeout naming the slot, bounded by the
// timeout, and the heap stays broken.
func (s *suite) putSignal(t *testing.T, kind heapKind) {
	const n, chunk, timeout = 3, 128, time.Second
	w, ok := kind.open(s, t, n, 1<<16, timeout, false)
	if !ok {
		return
	}
	size := int64(symheap.SignalSlots * chunk)
	in, out := w.alloc(t, size), w.alloc(t, size)
	ios := make([]*rankIO, n)
	for r, h := range w.heaps {
		io, err := newRankIO(h.Allocator(), size, size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, io.close()) })
		ios[r] = io
	}
	step := func(r int, h symheap.Collectives) error {
		next := (r + 1) % n
		err := h.Write(in, ios[r].in, 0)
		for k := range symheap.SignalSlots {
			part := func(t symheap.Tensor) symheap.Tensor {
				return symheap.Tensor{Off: t.Off + int64(k*chunk), Size: chunk}
			}
			err = errors.Join(err, h.Put(next, part(out), part(in)), h.Signal(next, k, uint32(k+1)))
		}
		for k := range symheap.SignalSlots {
			err = errors.Join(err, h.WaitSignal(k, uint32(k+1)))
		}
		return errors.Join(err, h.Read(ios[r].out, 0, out))
	}
	round := func(k int, run func(r int, h symheap.Collectives) error) {
		for r, io := range ios {
			fill(io.in.Bytes(), byte(17*r+5*k+1))
			clear(io.out.Bytes())
		}
		w.must(t, func(r int, h symheap.Collectives) error {
			return errors.Join(run(r, h), h.Synchronize())
		})
		for r, io := range ios {
			prev := ios[(r+n-1)%n]
			require.True(t, bytes.Equal(prev.in.Bytes(), io.out.Bytes()), "round %d: rank %d holds rank %d's input", k, r, (r+n-1)%n)
		}
	}
	round(0, step)
	graphs := make([]*alloc.Graph, n)
	w.must(t, func(r int, h symheap.Collectives) (err error) {
		graphs[r], err = h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return step(r, h) })
		return err
	})
	for k := 1; k <= 3; k++ {
		round(k, func(r int, _ symheap.Collectives) error { return graphs[r].Launch() })
	}
	for _, g := range graphs {
		require.NoError(t, g.Close())
	}

	h, start := w.heaps[1], time.Now()
	require.NoError(t, h.WaitSignal(symheap.SignalSlots-1, 1))
	err := h.Synchronize()
	require.ErrorIs(t, err, symheap.ErrCollectiveTimeout, "nobody signals")
	require.ErrorContains(t, err, fmt.Sprintf("on signal slot %d for a count of %d", symheap.SignalSlots-1, 4*symheap.SignalSlots+1))
	require.Less(t, time.Since(start), timeout+5*time.Second, "bounded by the timeout")
	require.ErrorIs(t, h.Err(), symheap.ErrCollectiveTimeout, "the heap stays broken")
	require.ErrorIs(t, h.Put(0, out, in), symheap.ErrCollectiveTimeout, "a broken heap refuses work")
}
