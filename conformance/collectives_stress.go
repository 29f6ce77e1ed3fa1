package conformance

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// StressReplaysEnv sets how many replays stress_replays makes (default
// 20, 50 with CAPALLOC_TEST_FULL=1 as in .ci/run; a GPU run uses 10000).
const StressReplaysEnv = "CAPALLOC_STRESS_REPLAYS"

// stressReplays: four ranks capture one step (fresh inputs in, a one-shot
// and a two-shot all-reduce, an all-gather, the results out) and replay
// it many times, each rank sleeping a random time before each launch so
// the ranks reach every collective skewed; every replay's results are
// checked on every rank. Epochs in the pads, never frozen into the graph,
// are what keeps skewed replays apart.
func (s *suite) stressReplays(t *testing.T, kind heapKind) {
	const n, elemsPer = 4, 2048
	replays := 20
	if os.Getenv("CAPALLOC_TEST_FULL") != "" {
		replays = 50
	}
	if v := os.Getenv(StressReplaysEnv); v != "" {
		var err error
		replays, err = strconv.Atoi(v)
		require.NoError(t, err, StressReplaysEnv)
	}
	w, ok := kind.open(s, t, n, 1<<20, 20*time.Second, false)
	if !ok {
		return
	}
	size := int64(4 * elemsPer)
	x, y, g := w.alloc(t, size), w.alloc(t, size), w.alloc(t, n*size)
	ios := make([]*rankIO, n)
	for r, h := range w.heaps {
		io, err := newRankIO(h.Allocator(), size, 2*size+n*size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, io.close()) })
		ios[r] = io
	}
	step := func(h symheap.Collectives, io *rankIO) error {
		for _, op := range []func() error{
			func() error { return h.Write(x, io.in, 0) },
			func() error { return h.CopyLocal(y, x) },
			func() error { return h.AllReduceWith(x, symheap.Int32, symheap.OneShot) },
			func() error { return h.AllReduceWith(y, symheap.Int32, symheap.TwoShot) },
			func() error { return h.AllGather(x, g) },
			func() error { return h.Read(io.out, 0, x) },
			func() error { return h.Read(io.out, size, y) },
			func() error { return h.Read(io.out, 2*size, g) },
		} {
			if err := op(); err != nil {
				return err
			}
		}
		return nil
	}
	graphs := make([]*alloc.Graph, n)
	w.must(t, func(r int, h symheap.Collectives) error {
		var err error
		graphs[r], err = h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return step(h, ios[r]) })
		return err
	})
	t.Cleanup(func() {
		for _, gr := range graphs {
			require.NoError(t, gr.Close())
		}
	})
	in := func(r, k, i int) int32 { return int32(r*1000003 + k*7919 + i) }
	w.must(t, func(r int, h symheap.Collectives) error {
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		for k := range replays {
			b := ios[r].in.Bytes()
			for i := range elemsPer {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(in(r, k, i)))
			}
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			if err := graphs[r].Launch(); err != nil {
				return fmt.Errorf("replay %d: %w", k, err)
			}
			if err := h.Synchronize(); err != nil {
				return fmt.Errorf("replay %d: %w", k, err)
			}
			out := ios[r].out.Bytes()
			for i := range elemsPer {
				var sum int32
				for p := range n {
					sum += in(p, k, i)
				}
				for part, want := range []int32{sum, sum} {
					if got := int32(binary.LittleEndian.Uint32(out[int64(part)*size+4*int64(i):])); got != want {
						return fmt.Errorf("replay %d: element %d of all-reduce %d is %d, want %d", k, i, part, got, want)
					}
				}
				for p := range n {
					if got := int32(binary.LittleEndian.Uint32(out[2*size+int64(p)*size+4*int64(i):])); got != sum {
						return fmt.Errorf("replay %d: element %d of gathered chunk %d is %d, want %d", k, i, p, got, sum)
					}
				}
			}
		}
		return nil
	})
}
