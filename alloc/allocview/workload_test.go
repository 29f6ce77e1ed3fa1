package allocview

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

// workload is an inference engine's device memory after an incident, for
// the views to draw (the browser test loads every page over it, and the
// docs' screenshots are of it). The "decoder" allocator keeps its
// history: model weights are loaded, a workspace reserved, a graph pool
// ("decode") of poolGraphs decode graphs captured at start-up (one per
// batch size, "batch-64" first, each keeping its logits) and a graph
// ("prefill") that owns
// its temporaries and holds a KV page the engine evicted while it was
// recorded; then the engine serves: a paged KV cache grows as sequences
// lengthen and leaves holes where they finish, each step's activations
// come and go, until a KV growth the device cannot hold fails (an
// out-of-memory error, the reclaim ladder giving the cached segments
// back), after which half the cache is evicted and serving goes on. The
// "prefill" allocator keeps no history: live activations and a wholly
// cached segment.
type workload struct {
	decoder, prefill *alloc.Allocator
	pool             *alloc.GraphPool
	graphs           []*alloc.Graph // the pool's, largest batch first, then the prefill graph
	poolBytes        int64          // the pool's memory once its graphs are captured
}

// poolGraphs is how many graphs the pool holds: batch sizes 1 to 64.
const poolGraphs = 64

// The names the views show: the pool's, the prefill graph's, and each
// decode graph's, by its batch size.
const (
	poolName         = "decode"
	prefillGraphName = "prefill"
)

func batchGraphName(batch int64) string { return fmt.Sprintf("batch-%d", batch) }

// The allocation sites below are what the profile and the timeline name,
// one function each.

func loadWeights(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

func reserveWorkspace(a *alloc.Allocator) (alloc.Buffer, error) {
	return a.Workspace("attention", 2<<20)
}

func kvPage(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(512 << 10) }

func growKV(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

func decodeTemp(a *alloc.Allocator, batch int64) (alloc.Buffer, error) {
	return a.Alloc(batch * 48 << 10)
}

func logits(a *alloc.Allocator, batch int64) (alloc.Buffer, error) { return a.Alloc(batch * 2 << 10) }

func prefillTemp(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(3 << 20) }

func activations(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

// newWorkload builds the workload on cpu drivers, every allocation's call
// site recorded (alloc.SetProfileRate(1)); the test's cleanup closes it
// all and restores the rate.
func newWorkload(t testing.TB) *workload {
	t.Helper()
	prev, err := alloc.SetProfileRate(1)
	require.NoError(t, err)
	t.Cleanup(func() { alloc.SetProfileRate(prev) })
	open := func(name string, limit int64, history int) *alloc.Allocator {
		d, err := cpu.New(cpu.Options{MemoryLimit: limit})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, d.Close()) })
		return alloctest.New(t, d, alloc.Options{Name: name, History: history})
	}
	w := &workload{decoder: open("decoder", 128<<20, 20000), prefill: open("prefill", 96<<20, 0)}
	// Cleanups run last first: the buffers and graphs go before their
	// allocators close (Close reports what is left as a leak).
	bufs := map[*alloc.Allocator][]alloc.Buffer{}
	var kv []alloc.Buffer // the decoder's KV pages
	t.Cleanup(func() {
		for _, g := range w.graphs {
			require.NoError(t, g.Close())
		}
		if w.pool != nil {
			require.NoError(t, w.pool.Close())
		}
		for a, bs := range bufs {
			for _, b := range bs {
				require.NoError(t, a.Free(b))
			}
		}
		for _, p := range kv {
			require.NoError(t, w.decoder.Free(p))
		}
	})
	keep := func(a *alloc.Allocator, b alloc.Buffer, err error) {
		t.Helper()
		require.NoError(t, err)
		bufs[a] = append(bufs[a], b)
	}
	dec, pre := w.decoder, w.prefill

	// Start-up: weights, the workspace, the first KV pages, the graphs.
	for _, n := range []int64{16 << 20, 8 << 20, 8 << 20} {
		b, err := loadWeights(dec, n)
		keep(dec, b, err)
	}
	_, err = reserveWorkspace(dec)
	require.NoError(t, err)
	grow := func(pages int) {
		t.Helper()
		for range pages {
			p, err := kvPage(dec)
			require.NoError(t, err)
			kv = append(kv, p)
		}
	}
	grow(8)
	host, err := dec.HostAlloc(64 << 10)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, host.Close()) })

	// A warm-up, every batch size run once eagerly, fills the cache the
	// pool grows from (a capture cannot ask the driver for more); then
	// the pool's graphs are captured, largest batch first.
	warm, err := decodeTemp(dec, poolGraphs)
	require.NoError(t, err)
	outs := []alloc.Buffer{warm}
	for batch := int64(poolGraphs); batch >= 1; batch-- {
		b, err := logits(dec, batch)
		require.NoError(t, err)
		outs = append(outs, b)
	}
	for _, b := range outs {
		require.NoError(t, dec.Free(b))
	}
	w.pool = dec.NewGraphPool()
	w.pool.SetName(poolName)
	for batch := int64(poolGraphs); batch >= 1; batch-- {
		g, err := dec.WithCapture(alloc.CaptureOptions{Pool: w.pool, Name: batchGraphName(batch)}, func() error {
			tmp, err := decodeTemp(dec, batch)
			if err != nil {
				return err
			}
			if _, err := logits(dec, batch); err != nil { // the graph's until it is closed
				return err
			}
			return dec.Free(tmp) // the pool's again for the next capture
		})
		require.NoError(t, err)
		require.Empty(t, g.Warnings(), "batch %d's capture did not fit in the pool and the warmed cache", batch)
		w.graphs = append(w.graphs, g)
	}
	w.poolBytes = w.pool.Bytes()
	evicted := kv[len(kv)-1]
	kv = kv[:len(kv)-1]
	g, err := dec.WithCapture(alloc.CaptureOptions{Name: prefillGraphName}, func() error {
		if err := dec.UploadHost(evicted, 0, host, 0, 64<<10); err != nil {
			return err
		}
		if err := dec.Free(evicted); err != nil { // the graph holds it
			return err
		}
		for range 2 {
			if _, err := prefillTemp(dec); err != nil { // the graph's own
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	w.graphs = append(w.graphs, g)

	// Serving: steps replay the graphs (no allocation); new requests'
	// activations come and go, sequences lengthen the cache, some finish.
	step := func(i int) {
		t.Helper()
		var acts []alloc.Buffer
		for layer := range 4 {
			b, err := activations(dec, int64(layer%2+1)<<20)
			require.NoError(t, err)
			acts = append(acts, b)
		}
		for _, b := range acts {
			require.NoError(t, dec.Free(b))
		}
		if i%2 == 0 {
			grow(3)
		}
		if i%6 == 5 { // a sequence finished
			require.NoError(t, dec.Free(kv[len(kv)/2]))
			kv = append(kv[:len(kv)/2], kv[len(kv)/2+1:]...)
		}
	}
	for i := range 48 {
		step(i)
	}
	// The cache outgrows the device: the error is in the history, and
	// the reclaim ladder gave the cached segments back trying to serve it.
	_, err = growKV(dec, 64<<20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	kept := kv[:0]
	for i, p := range kv { // the engine evicts every other sequence
		if i%2 == 1 {
			require.NoError(t, dec.Free(p))
		} else {
			kept = append(kept, p)
		}
	}
	kv = kept
	for i := range 5 {
		step(i)
	}

	for _, n := range []int64{12 << 20, 6 << 20, 700 << 10} {
		b, err := activations(pre, n)
		keep(pre, b, err)
	}
	done, err := activations(pre, 32<<20) // a finished batch: its segment stays cached
	require.NoError(t, err)
	require.NoError(t, pre.Free(done))
	return w
}

// The workload is in the state its doc (and the docs' screenshots) say:
// every block state has bytes in the decoder, there are 65 live graphs
// with their names, the named pool holds memory of its own and 64 of
// them; in the history, the pool's captures
// take nothing from the driver, the out-of-memory error is there once,
// and the reclaim ladder gave segments back before it; the prefill
// allocator has live and wholly cached memory.
func TestWorkloadState(t *testing.T) {
	w := newWorkload(t)
	s, err := w.decoder.Snapshot()
	require.NoError(t, err)
	for _, st := range memmap.BlockStates() {
		require.Positive(t, s.Bytes[st], "decoder: no bytes %s", st)
	}
	require.Len(t, s.Graphs, poolGraphs+1)
	var names []string
	for _, g := range s.Graphs { // by ID: in capture order
		names = append(names, g.Name)
	}
	want := []string{}
	for batch := int64(poolGraphs); batch >= 1; batch-- {
		want = append(want, batchGraphName(batch))
	}
	require.Equal(t, append(want, prefillGraphName), names)
	require.Len(t, s.Pools, 1)
	require.Equal(t, poolName, s.Pools[0].Name)
	require.Equal(t, w.poolBytes, s.Pools[0].Bytes)
	require.Len(t, s.Pools[0].Graphs, poolGraphs)
	require.Positive(t, w.poolBytes)
	require.GreaterOrEqual(t, s.Bytes[memmap.BlockGraphOwned]+s.Bytes[memmap.BlockGraphPool], w.poolBytes+6<<20, "the pool's memory (its graphs' blocks and its free part) and the prefill graph's are held for graphs")
	require.EqualValues(t, 1, s.Stats.OutOfMemory)

	h := historyOf(w.decoder, MaxEvents)
	require.Equal(t, h.Recorded, uint64(len(h.Events)), "the history keeps every event")
	var captures, ooms, unmapped int
	for _, e := range h.Events {
		switch e.Kind {
		case memmap.EventCaptureBegin:
			captures++
		case memmap.EventSegmentMap:
			require.False(t, captures > 0 && captures <= poolGraphs, "a capture into the pool took memory from the driver (event %d)", e.Seq)
		case memmap.EventSegmentUnmap:
			if ooms == 0 {
				unmapped++
			}
		case memmap.EventOutOfMemory:
			ooms++
		}
	}
	require.Equal(t, poolGraphs+1, captures)
	require.Equal(t, 1, ooms, "the out-of-memory error is in the history")
	require.Positive(t, unmapped, "the reclaim ladder gave no segment back before the error")

	p, err := w.prefill.Snapshot()
	require.NoError(t, err)
	require.Positive(t, p.Bytes[memmap.BlockCachedSegment])
	require.Positive(t, p.Bytes[memmap.BlockLive])
}
