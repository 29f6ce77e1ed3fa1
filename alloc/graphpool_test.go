package alloc_test

import (
	"bytes"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

const poolStep = 256 << 10 // a step's temporary in these tests

// newPoolAllocator is an allocator on a fresh cpu driver whose cache holds
// a freed block of warm bytes: the eager run an engine makes before it
// captures.
func newPoolAllocator(t *testing.T, warm int64) (*alloc.Allocator, *cpu.Driver) {
	t.Helper()
	d, a := newCPUAllocator(t, 64<<20)
	if warm > 0 {
		b, err := a.Alloc(warm)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	return a, d
}

// newPoolOut is newPoolAllocator with out, a 512-byte buffer the tests'
// captured steps copy into (see captureStep).
func newPoolOut(t *testing.T, warm int64) (*alloc.Allocator, *cpu.Driver, alloc.Buffer) {
	t.Helper()
	a, d := newPoolAllocator(t, warm)
	out, err := a.Alloc(512)
	require.NoError(t, err)
	return a, d, out
}

// closeAll closes what a test opened on a, in order (graphs, pools), then
// frees out and closes a; each without error, so nothing is left open.
func closeAll(t *testing.T, a *alloc.Allocator, out alloc.Buffer, open ...io.Closer) {
	t.Helper()
	for _, c := range open {
		require.NoError(t, c.Close())
	}
	require.NoError(t, a.Free(out))
	require.NoError(t, a.Close())
}

// captureStep captures a step into gp (nil: none) that allocates n bytes,
// fills them with v, copies them into out and frees them unless keep: then
// the graph holds them, and they are returned.
func captureStep(t *testing.T, a *alloc.Allocator, gp *alloc.GraphPool, n int64, v byte, out alloc.Buffer, keep bool) (*alloc.Graph, alloc.Buffer) {
	t.Helper()
	var tmp alloc.Buffer
	g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error {
		var err error
		if tmp, err = a.Alloc(n); err != nil {
			return err
		}
		if err := a.Memset(tmp, 0, v, n); err != nil {
			return err
		}
		if err := a.Copy(out, 0, tmp, 0, min(n, out.Size())); err != nil {
			return err
		}
		if keep {
			return nil
		}
		return a.Free(tmp)
	})
	require.NoError(t, err)
	return g, tmp
}

// Graphs of one pool reuse what earlier captures freed: the pool holds
// the largest step, not the sum, and the captures make no driver
// allocation. Without a pool each graph owns its own.
func TestGraphPoolSharesWhatCapturesFreed(t *testing.T) {
	a, _, out := newPoolOut(t, poolStep)
	gp := a.NewGraphPool()
	before := a.Stats()
	g1, t1 := captureStep(t, a, gp, poolStep, 1, out, false)
	g2, t2 := captureStep(t, a, gp, poolStep/2, 2, out, false)
	require.True(t, overlap(t1.Ptr(), t1.Size(), t2.Ptr(), t2.Size()), "the second capture reuses the first's freed temporary")
	require.Equal(t, int64(poolStep), gp.Bytes(), "the pool holds the largest step")
	after := a.Stats()
	require.Equal(t, before.DriverAllocs, after.DriverAllocs, "no driver allocation: the pool borrowed the cache")
	require.Empty(t, g1.Warnings())

	// Replays, each one's values its own.
	for _, c := range []struct {
		g *alloc.Graph
		v byte
	}{{g1, 1}, {g2, 2}, {g1, 1}} {
		require.NoError(t, c.g.Launch())
		got := make([]byte, 512)
		require.NoError(t, a.Download(got, out, 0))
		require.Equal(t, bytes.Repeat([]byte{c.v}, 512), got)
	}

	n1, u1 := captureStep(t, a, nil, poolStep, 3, out, false)
	n2, u2 := captureStep(t, a, nil, poolStep, 4, out, false)
	require.False(t, overlap(u1.Ptr(), u1.Size(), u2.Ptr(), u2.Size()), "without a pool each graph owns its memory")
	for _, g := range []*alloc.Graph{g1, g2, n1, n2} {
		require.NoError(t, g.Close())
	}
	closeAll(t, a, out, gp)
}

// What a graph holds when its capture ends (its output) is never given to
// another capture of the pool while the graph lives: replaying the other
// graph leaves it intact.
func TestGraphPoolKeepsAGraphsOutputs(t *testing.T) {
	a, _, out := newPoolOut(t, 2*poolStep)
	gp := a.NewGraphPool()
	g1, kept := captureStep(t, a, gp, poolStep, 1, out, true)
	g2, t2 := captureStep(t, a, gp, poolStep, 2, out, false)
	require.False(t, overlap(kept.Ptr(), kept.Size(), t2.Ptr(), t2.Size()), "the second capture was given the first graph's output")
	require.NoError(t, g1.Launch())
	require.NoError(t, g2.Launch())
	got := make([]byte, poolStep)
	require.NoError(t, a.Download(got, kept, 0))
	require.Equal(t, bytes.Repeat([]byte{1}, poolStep), got, "the other graph's replay overwrote the output")

	require.ErrorIs(t, a.Free(kept), alloc.ErrInvalidBuffer, "a graph's output is freed by Graph.Close, not Free")
	require.NoError(t, g1.Close())
	require.Error(t, a.Download(got, kept, 0), "a closed graph's output is invalid")

	// Once its graph is closed, the output's memory is the pool's again.
	g3, t3 := captureStep(t, a, gp, poolStep, 3, out, false)
	require.Equal(t, int64(2*poolStep), gp.Bytes(), "the pool did not grow: the closed graph's output was reused")
	_ = t3
	closeAll(t, a, out, g2, g3, gp)
}

// The pool's memory goes back to the allocator when the pool and its last
// graph are both closed, in either order; until then no eager allocation
// is given it.
func TestGraphPoolReturnsMemoryWhenPoolAndLastGraphClosed(t *testing.T) {
	for _, poolFirst := range []bool{true, false} {
		name := "graph_closed_first"
		if poolFirst {
			name = "pool_closed_first"
		}
		t.Run(name, func(t *testing.T) {
			a, _, out := newPoolOut(t, poolStep)
			gp := a.NewGraphPool()
			g, tmp := captureStep(t, a, gp, poolStep, 1, out, false)
			cachedWithPool := a.Stats().BytesCached

			first, second := func() error { return g.Close() }, gp.Close
			if poolFirst {
				first, second = gp.Close, func() error { return g.Close() }
			}
			require.NoError(t, first())
			e, err := a.Alloc(poolStep)
			require.NoError(t, err)
			require.False(t, overlap(e.Ptr(), e.Size(), tmp.Ptr(), tmp.Size()), "an eager allocation was given the memory of a pool that still has a graph or is open")
			require.NoError(t, a.Free(e))
			require.Equal(t, int64(poolStep), gp.Bytes())

			require.NoError(t, second())
			require.Zero(t, gp.Bytes())
			require.Equal(t, cachedWithPool+poolStep, a.Stats().BytesCached, "the pool's memory is the cache's again")
			require.NoError(t, a.CheckPool())
			closeAll(t, a, out)
		})
	}
}

// A capture into another allocator's pool, or into a closed pool, is
// refused before the driver is asked to capture, and nothing changes.
func TestGraphPoolRefusesForeignAndClosedPools(t *testing.T) {
	a, _ := newPoolAllocator(t, poolStep)
	b, _ := newPoolAllocator(t, poolStep)
	foreign := b.NewGraphPool()
	fn := func() error { return nil }
	_, err := a.WithCapture(alloc.CaptureOptions{Pool: foreign}, fn)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "another allocator")
	on, err := a.IsCapturing()
	require.NoError(t, err)
	require.False(t, on, "the refused capture was begun")
	require.Zero(t, a.Stats().Captures+a.Stats().FailedCapture)

	closed := a.NewGraphPool()
	require.NoError(t, closed.Close())
	_, err = a.WithCapture(alloc.CaptureOptions{Pool: closed}, fn)
	require.ErrorIs(t, err, alloc.ErrClosed)
	require.ErrorIs(t, closed.Close(), alloc.ErrClosed, "closed twice")

	// The foreign pool was not touched: its own allocator's capture works
	// and it closes.
	out, err := b.Alloc(512)
	require.NoError(t, err)
	g, _ := captureStep(t, b, foreign, poolStep, 1, out, false)
	require.NoError(t, g.Close())
	require.NoError(t, foreign.Close())
	require.NoError(t, b.Free(out))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

// With nothing cached the capture's allocation is the graph's own memory,
// as without a pool, and the graph says so.
func TestGraphPoolWithAnEmptyCacheWarns(t *testing.T) {
	a, _, out := newPoolOut(t, 0)
	gp := a.NewGraphPool()
	g, _ := captureStep(t, a, gp, 4<<20, 1, out, false)
	require.Zero(t, gp.Bytes())
	require.Len(t, g.Warnings(), 1)
	require.Contains(t, g.Warnings()[0], "graph pool")
	require.NoError(t, g.Launch())
	closeAll(t, a, out, g, gp)
}

// Close finds a pool left open: a leak, reported, and its memory given
// back to the driver with the rest.
func TestGraphPoolLeftOpenIsALeakAtClose(t *testing.T) {
	a, d, out := newPoolOut(t, poolStep)
	gp := a.NewGraphPool()
	g, _ := captureStep(t, a, gp, poolStep, 1, out, false)
	require.NoError(t, g.Close())
	require.NoError(t, a.Free(out))
	err := a.Close()
	require.ErrorIs(t, err, alloc.ErrLeaked)
	require.Contains(t, err.Error(), "graph pool")
	u, err := d.Usage()
	require.NoError(t, err)
	require.Zero(t, u.Device, "the pool's memory was not given back")
}

// Graphs and the pool closed from several goroutines at once, while
// another goroutine allocates: the memory goes back exactly once (-race).
func TestGraphPoolConcurrentCloses(t *testing.T) {
	a, d, out := newPoolOut(t, poolStep)
	gp := a.NewGraphPool()
	var gs []*alloc.Graph
	for i := range 8 {
		g, _ := captureStep(t, a, gp, poolStep>>(i%3), byte(i), out, false)
		gs = append(gs, g)
	}
	require.Equal(t, int64(poolStep), gp.Bytes())
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Add(1)
		go func() { defer wg.Done(); require.NoError(t, g.Close()) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); require.NoError(t, gp.Close()) }()
	go func() {
		defer wg.Done()
		for range 50 {
			b, err := a.Alloc(4096)
			require.NoError(t, err)
			require.NoError(t, a.Free(b))
		}
	}()
	wg.Wait()
	require.Zero(t, gp.Bytes())
	require.NoError(t, a.CheckPool())
	closeAll(t, a, out)
	u, err := d.Usage()
	require.NoError(t, err)
	require.Zero(t, u.Device)
}

// Captured smallest first, each capture needs more than the pool holds:
// the pool extends its segment over the cache's free memory beside it, so
// it ends at about the largest capture's need, not the sum of pieces.
func TestGraphPoolGrowsOneSegmentSmallestFirst(t *testing.T) {
	const unit, k = 16 << 10, 16
	a, _, out := newPoolOut(t, 0)
	// The warm-up: the largest step's three temporaries, freed.
	cacheFreed(t, a, k*unit, k*unit/2, k*unit/4)
	gp := a.NewGraphPool()
	var gs []*alloc.Graph
	for i := int64(1); i <= k; i++ {
		g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error {
			var bs []alloc.Buffer
			for _, n := range []int64{i * unit, i * unit / 2, i * unit / 4} {
				b, err := a.Alloc(n)
				if err != nil {
					return err
				}
				if err := a.Memset(b, 0, byte(i), n); err != nil {
					return err
				}
				bs = append(bs, b)
			}
			for _, b := range bs {
				if err := a.Free(b); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.Empty(t, g.Warnings(), "capture %d", i)
		require.NoError(t, gp.CheckArena())
		require.NoError(t, a.CheckPool())
		gs = append(gs, g)
	}
	largest := int64(k*unit + k*unit/2 + k*unit/4)
	require.LessOrEqual(t, gp.Bytes(), largest*11/10, "the pool holds %.2fx the largest capture's need", float64(gp.Bytes())/float64(largest))
	// The snapshot lists the pool's own blocks where it borrowed, across
	// the blocks its segment grew over: they sum to its bytes, and every
	// byte reserved is in one state.
	s, err := a.Snapshot()
	require.NoError(t, err)
	require.Len(t, s.Pools, 1)
	var inPool, all int64
	for _, seg := range s.Segments {
		for _, blk := range seg.Blocks {
			all += blk.Size
			if blk.Pool == s.Pools[0].ID {
				inPool += blk.Size
			}
		}
	}
	require.Equal(t, gp.Bytes(), inPool)
	require.Equal(t, s.Pools[0].Bytes, inPool)
	require.Equal(t, s.Stats.BytesReserved, all)
	require.Equal(t, gp.Bytes(), s.Bytes[memmap.BlockGraphPool], "every capture freed what it took: the pool's memory is all free")
	for _, g := range gs {
		require.NoError(t, g.Launch())
		require.NoError(t, g.Close())
	}
	require.NoError(t, gp.Close())
	require.NoError(t, a.CheckPool())
	closeAll(t, a, out)
}

// The allocator's snapshot shows the pool's memory as graphs' memory:
// graph-owned where a graph holds it, graph-pool where it is free for the
// next capture.
func TestGraphPoolMemoryIsGraphOwnedInTheSnapshot(t *testing.T) {
	a, _, out := newPoolOut(t, poolStep)
	gp := a.NewGraphPool()
	owned := func() int64 {
		s, err := a.Snapshot()
		require.NoError(t, err)
		return s.Bytes[memmap.BlockGraphOwned] + s.Bytes[memmap.BlockGraphPool]
	}
	before := owned()
	g, _ := captureStep(t, a, gp, poolStep, 1, out, false)
	require.Equal(t, before+gp.Bytes(), owned())
	require.NoError(t, g.Close())
	require.NoError(t, gp.Close())
	require.Equal(t, before, owned())
	closeAll(t, a, out)
}

// Trim gives back what the allocator caches, never what a pool holds:
// the pool's graphs still replay over it, and once the pool and its graph
// are closed Trim gives it back too.
func TestGraphPoolSurvivesTrim(t *testing.T) {
	a, d := newPoolAllocator(t, poolStep)
	out, err := a.AllocSync(512) // not in the pool's segment: Trim could give it back
	require.NoError(t, err)
	gp := a.NewGraphPool()
	g, _ := captureStep(t, a, gp, poolStep, 7, out, false)
	require.NoError(t, a.Trim())
	require.NoError(t, g.Launch())
	got := make([]byte, 512)
	require.NoError(t, a.Download(got, out, 0))
	require.Equal(t, bytes.Repeat([]byte{7}, 512), got)
	require.NoError(t, a.Trim())
	require.NoError(t, a.Synchronize())
	held, err := d.Usage()
	require.NoError(t, err)
	require.NotZero(t, held.Device, "Trim gave back the memory of a pool whose graph lives")
	require.NoError(t, g.Close())
	require.NoError(t, gp.Close())
	require.NoError(t, a.Free(out))
	require.NoError(t, a.Trim())
	require.NoError(t, a.Synchronize()) // the give-back is stream-ordered
	now, err := d.Usage()
	require.NoError(t, err)
	require.Zero(t, now.Device, "the pool's memory was not given back once it and its graph were closed")
	require.NoError(t, a.Close())
}

// BeginCapture and EndCapture capture into a pool as WithCapture does:
// the second capture reuses what the first freed, and a closed pool is
// refused with nothing begun.
func TestGraphPoolBeginCapture(t *testing.T) {
	a, _ := newPoolAllocator(t, poolStep)
	gp := a.NewGraphPool()
	capture := func(n int64) (*alloc.Graph, alloc.Buffer) {
		require.NoError(t, gp.BeginCapture(alloc.Global))
		tmp, err := a.Alloc(n)
		require.NoError(t, err)
		require.NoError(t, a.Memset(tmp, 0, 7, n))
		require.NoError(t, a.Free(tmp))
		g, err := a.EndCapture()
		require.NoError(t, err)
		return g, tmp
	}
	g1, t1 := capture(poolStep)
	g2, t2 := capture(poolStep / 2)
	require.True(t, overlap(t1.Ptr(), t1.Size(), t2.Ptr(), t2.Size()), "the second capture reuses the first's freed temporary")
	require.Equal(t, int64(poolStep), gp.Bytes())
	require.NoError(t, g1.Launch())
	require.NoError(t, g2.Launch())
	require.NoError(t, gp.Close())
	require.ErrorIs(t, gp.BeginCapture(alloc.Global), alloc.ErrClosed)
	capturing, err := a.IsCapturing()
	require.NoError(t, err)
	require.False(t, capturing, "a refused BeginCapture begins nothing")
	require.NoError(t, g1.Close())
	require.NoError(t, g2.Close())
	require.NoError(t, a.Close())
}
