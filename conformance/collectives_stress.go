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
// 20, 50 with CAPALLOC_TEST_FULL=1 as in .ci/run; the GPU run owed by
// issue 20 uses 10000).
const StressReplaysEnv = "CAPALLOC_STRESS_REPLAYS"

// stressReplays: four ranks capture one step (fresh inputs in, a one-shot
// and a two-shot all-reduce, an all-gather, the results out) and replay
// it many times, each rank sleeping a random time before each launch so
// the ranks reach every collective skewed; every replay's results are
// checked on every rank. Epochs in the pads, never frozen into the graph,
// are what keeps skewed replays apart.
func (s *suite) stressReplays(t *testing.T, kind heapKind) {
	replays := stressReplayCount(t)
	w, ok := kind.open(s, t, stressRanks, 1<<20, 20*time.Second, false)
	if !ok {
		return
	}
	st := &stressStep{size: 4 * stressElems}
	st.x, st.y, st.g = w.alloc(t, st.size), w.alloc(t, st.size), w.alloc(t, stressRanks*st.size)
	ios := make([]*rankIO, stressRanks)
	for r, h := range w.heaps {
		io, err := newRankIO(h.Allocator(), st.size, 2*st.size+stressRanks*st.size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, io.close()) })
		ios[r] = io
	}
	graphs := make([]*alloc.Graph, stressRanks)
	w.must(t, func(r int, h symheap.Collectives) error {
		var err error
		graphs[r], err = h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return st.run(h, ios[r]) })
		return err
	})
	t.Cleanup(func() {
		for _, gr := range graphs {
			require.NoError(t, gr.Close())
		}
	})
	w.must(t, func(r int, h symheap.Collectives) error {
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		for k := range replays {
			b := ios[r].in.Bytes()
			for i := range stressElems {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(stressIn(r, k, i)))
			}
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
			if err := graphs[r].Launch(); err != nil {
				return fmt.Errorf("replay %d: %w", k, err)
			}
			if err := h.Synchronize(); err != nil {
				return fmt.Errorf("replay %d: %w", k, err)
			}
			if err := st.check(ios[r].out.Bytes(), k); err != nil {
				return err
			}
		}
		return nil
	})
}

const (
	stressRanks = 4
	stressElems = 2048 // int32 elements of each rank's input
)

// stressReplayCount is how many replays stress_replays makes: 20, 50
// with CAPALLOC_TEST_FULL, or $CAPALLOC_STRESS_REPLAYS.
func stressReplayCount(t *testing.T) int {
	replays := 20
	if os.Getenv("CAPALLOC_TEST_FULL") != "" {
		replays = 50
	}
	if v := os.Getenv(StressReplaysEnv); v != "" {
		var err error
		replays, err = strconv.Atoi(v)
		require.NoError(t, err, StressReplaysEnv)
	}
	return replays
}

// stressIn is element i of rank r's input at replay k.
func stressIn(r, k, i int) int32 { return int32(r*1000003 + k*7919 + i) }

// stressStep is the captured step: x and y hold the input, x all-reduced
// one-shot and y two-shot, g gathers every rank's x; the output holds x,
// y and g in that order.
type stressStep struct {
	size    int64 // bytes of x and y
	x, y, g symheap.Tensor
}

func (st *stressStep) run(h symheap.Collectives, io *rankIO) error {
	for _, op := range []func() error{
		func() error { return h.Write(st.x, io.in, 0) },
		func() error { return h.CopyLocal(st.y, st.x) },
		func() error { return h.AllReduceWith(st.x, symheap.Int32, symheap.OneShot) },
		func() error { return h.AllReduceWith(st.y, symheap.Int32, symheap.TwoShot) },
		func() error { return h.AllGather(st.x, st.g) },
		func() error { return h.Read(io.out, 0, st.x) },
		func() error { return h.Read(io.out, st.size, st.y) },
		func() error { return h.Read(io.out, 2*st.size, st.g) },
	} {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// check checks replay k's output: both all-reduces are the sum over the
// ranks, and every gathered chunk is that sum too.
func (st *stressStep) check(out []byte, k int) error {
	size := st.size
	for i := range stressElems {
		var sum int32
		for p := range stressRanks {
			sum += stressIn(p, k, i)
		}
		for part, want := range []int32{sum, sum} {
			if got := int32(binary.LittleEndian.Uint32(out[int64(part)*size+4*int64(i):])); got != want {
				return fmt.Errorf("replay %d: element %d of all-reduce %d is %d, want %d", k, i, part, got, want)
			}
		}
		for p := range stressRanks {
			if got := int32(binary.LittleEndian.Uint32(out[2*size+int64(p)*size+4*int64(i):])); got != sum {
				return fmt.Errorf("replay %d: element %d of gathered chunk %d is %d, want %d", k, i, p, got, sum)
			}
		}
	}
	return nil
}
