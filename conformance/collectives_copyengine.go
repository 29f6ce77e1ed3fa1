package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// copyEngine: the all-gather and all-to-all forced to the copy-engine
// variant (symheap.CopyEngine: on the device heap one device-to-device
// copy per rank between barrier kernels, a memcpy node in a capture; on
// the host heap the host's copy) for chunks of every element type's
// size, an odd count of them, at a 16-aligned offset and one element
// past it; eager, then captured once per rank and replayed with new
// inputs every time. Each step poisons its input right after the
// collective: a rank that left while a peer still copied from it would
// hand that peer the poison. The mismatch with the kernel variant and the
// argument checks are in mismatchIsNamed and badCollectiveOperands.
func (s *suite) copyEngine(t *testing.T, kind heapKind) {
	const n, count = 3, 37
	w, ok := kind.open(s, t, n, 1<<18, 10*time.Second, false)
	if !ok {
		return
	}
	for _, op := range []copyOp{copyAllGather, copyAllToAll} {
		for _, dt := range everyDType {
			for _, shift := range []int64{0, dt.Size()} {
				t.Run(fmt.Sprintf("%s/%s/offset_%d", op.name, dt, shift), func(t *testing.T) {
					copyEngineCase(t, w, op, int64(count)*dt.Size(), shift)
				})
			}
		}
	}
}

// copyOp is a copy collective by the copy engines: its tensors' sizes for
// a chunk over n ranks and its reference.
type copyOp struct {
	name  string
	sizes func(n int, chunk int64) (in, out int64)
	run   func(h symheap.Collectives, in, out symheap.Tensor) error
	// want is byte i of rank r's out when rank p's in holds input(p, i).
	want func(n, r int, chunk int64, i int64, input func(p int, i int64) byte) byte
}

var (
	copyAllGather = copyOp{
		name:  "all_gather",
		sizes: func(n int, chunk int64) (int64, int64) { return chunk, int64(n) * chunk },
		run: func(h symheap.Collectives, in, out symheap.Tensor) error {
			return h.AllGatherWith(in, out, symheap.CopyEngine)
		},
		want: func(_, _ int, chunk, i int64, input func(int, int64) byte) byte { return input(int(i/chunk), i%chunk) },
	}
	copyAllToAll = copyOp{
		name:  "all_to_all",
		sizes: func(n int, chunk int64) (int64, int64) { return int64(n) * chunk, int64(n) * chunk },
		run: func(h symheap.Collectives, in, out symheap.Tensor) error {
			return h.AllToAllWith(in, out, symheap.CopyEngine)
		},
		want: func(_, r int, chunk, i int64, input func(int, int64) byte) byte {
			return input(int(i/chunk), int64(r)*chunk+i%chunk)
		},
	}
)

// copyEngineCase runs op on chunks of chunk bytes, its tensors shift
// bytes past the heap's allocations: round 0 eager, rounds 1-3 replays
// of one graph per rank.
func copyEngineCase(t *testing.T, w *world, op copyOp, chunk, shift int64) {
	n := len(w.heaps)
	inSize, outSize := op.sizes(n, chunk)
	in, out := w.alloc(t, inSize+shift), w.alloc(t, outSize+shift)
	in, out = symheap.Tensor{Off: in.Off + shift, Size: inSize}, symheap.Tensor{Off: out.Off + shift, Size: outSize}
	t.Cleanup(func() {
		for _, h := range w.heaps {
			require.NoError(t, h.Reset())
		}
	})
	ios := make([]*rankIO, n)
	for r, h := range w.heaps {
		io, err := newRankIO(h.Allocator(), inSize, outSize)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, io.close()) })
		ios[r] = io
	}
	step := func(r int, h symheap.Collectives) error {
		if err := h.Write(in, ios[r].in, 0); err != nil {
			return err
		}
		if err := op.run(h, in, out); err != nil {
			return err
		}
		if err := h.Write(in, ios[r].zero, 0); err != nil {
			return err
		}
		return h.Read(ios[r].out, 0, out)
	}
	graphs := make([]*alloc.Graph, n)
	for k := range 4 {
		input := func(p int, i int64) byte { return byte(int64(p*31+k*13+1) + i*7) }
		w.must(t, func(r int, h symheap.Collectives) error {
			b := ios[r].in.Bytes()
			for i := range b {
				b[i] = input(r, int64(i))
			}
			clear(ios[r].out.Bytes())
			if k == 0 {
				if err := step(r, h); err != nil {
					return err
				}
				return h.Synchronize()
			}
			if k == 1 {
				g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return step(r, h) })
				if err != nil {
					return err
				}
				graphs[r] = g
				t.Cleanup(func() { require.NoError(t, g.Close()) })
			}
			if err := graphs[r].Launch(); err != nil {
				return err
			}
			return h.Synchronize()
		})
		for r := range n {
			want := make([]byte, outSize)
			for i := range want {
				want[i] = op.want(n, r, chunk, int64(i), input)
			}
			require.Equal(t, want, ios[r].out.Bytes(), "rank %d, round %d (0 eager, then replays)", r, k)
		}
	}
}
