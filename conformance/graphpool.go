package conformance

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// Graph pools (docs/graph-pools.md): graphs captured into one pool share
// its memory, replay with their own fresh data, keep their outputs from
// one another, and give the memory back only when the pool and its last
// graph are closed.

// poolUnit is the smallest step's temporary; step k's is k units.
const poolUnit = 64 << 10

// pooledGraph is one graph of a pool: the replay program at one size and
// the range its capture took from the pool.
type pooledGraph struct {
	p     *program
	g     *alloc.Graph
	taken alloc.Buffer // a temporary of the capture's, its pointer and size kept after its free
}

// capturePooled captures p into gp in mode. Before the program it
// allocates and frees a temporary of the program's size, recording where
// the pool put it.
func capturePooled(t *testing.T, p *program, gp *alloc.GraphPool, mode alloc.CaptureMode) pooledGraph {
	t.Helper()
	var taken alloc.Buffer
	g, err := p.a.WithCapture(alloc.CaptureOptions{Mode: mode, Pool: gp}, func() error {
		var err error
		if taken, err = p.a.Alloc(p.n); err != nil {
			return err
		}
		return errors.Join(p.a.Free(taken), p.enqueue())
	})
	require.NoError(t, err)
	require.False(t, g.Eager(), "the driver refused capture")
	require.Empty(t, g.Warnings(), "the capture found no room in the pool")
	return pooledGraph{p: p, g: g, taken: taken}
}

// warmSteps makes k programs of 1..k units and runs the largest eagerly:
// the warm-up an engine makes, which leaves its temporary in the cache.
func warmSteps(t *testing.T, a *alloc.Allocator, k int) []*program {
	t.Helper()
	ps := make([]*program, k)
	for i := range ps {
		ps[i] = newProgram(t, a, int64(i+1)*poolUnit)
	}
	copy(ps[k-1].in.Bytes(), pattern(int(ps[k-1].n), 7))
	_, err := ps[k-1].eager()
	require.NoError(t, err, "warm-up")
	return ps
}

// captureSteps captures the programs, largest first, into gp.
func captureSteps(t *testing.T, ps []*program, gp *alloc.GraphPool, mode alloc.CaptureMode) []pooledGraph {
	t.Helper()
	k := len(ps)
	gs := make([]pooledGraph, k)
	for i := k - 1; i >= 0; i-- {
		gs[i] = capturePooled(t, ps[i], gp, mode)
	}
	return gs
}

// closePooled closes the graphs and their programs.
func closePooled(t *testing.T, gs []pooledGraph) {
	t.Helper()
	for _, pg := range gs {
		require.NoError(t, pg.g.Close())
		pg.p.close(t)
	}
}

func (s *suite) graphPool(t *testing.T) {
	runRules(t,
		rule{"shared_memory_fresh_replays", inEachMode(s.poolGraphsShareMemoryAndReplayFreshData)},
		rule{"outputs_kept_from_later_captures", s.poolKeepsOutputsFromLaterCaptures},
		rule{"refused_before_the_driver", s.poolOfOtherAllocatorOrClosedRefused},
		rule{"memory_back_when_pool_and_last_graph_closed", forBoth("pool_closed_first", s.poolMemoryBackAfterBothClosed)},
		rule{"interleaved_with_eager_work_and_other_captures", s.poolInterleavesWithEagerWorkAndOtherCaptures},
	)
}

// poolGraphsShareMemoryAndReplayFreshData: graphs captured into one pool
// take the warm-up's memory, no driver's, and share it; replays
// interleaved across them, each with fresh data, give every graph its own
// program's result, never a value another left in the shared memory.
func (s *suite) poolGraphsShareMemoryAndReplayFreshData(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	gp := e.a.NewGraphPool()
	const k = 4
	ps := warmSteps(t, e.a, k)
	before, reserved := e.spy.Snapshot(), e.a.Stats().BytesReserved
	gs := captureSteps(t, ps, gp, mode)
	// The captures took the warm-up's memory, no driver's.
	assertNoDeviceAllocation(t, e.spy, before)
	assert.Equal(t, reserved, e.a.Stats().BytesReserved, "the captures allocated device memory")
	largest := int64(k) * poolUnit
	assert.GreaterOrEqual(t, gp.Bytes(), largest)
	assert.Less(t, gp.Bytes(), int64(k*(k+1)/2)*poolUnit, "the pool holds the sum of the graphs' temporaries: nothing shared")
	for i := 1; i < k; i++ {
		assert.True(t, overlaps(gs[i].taken.Ptr(), gs[i].taken.Size(), gs[0].taken.Ptr(), gs[0].taken.Size()),
			"graph %d's temporary does not share the pool's memory with graph 0's", i)
	}
	// Replays interleaved across the graphs, each with fresh data:
	// every result is its own program's on its own input, never a
	// value another graph left in the shared memory.
	for r := range 3 {
		for _, i := range []int{0, 3, 1, 2, 3, 0} {
			require.NoError(t, checkFreshReplays(gs[i].p, gs[i].g, 1, uint64(100*r+10*i)), "graph %d, round %d", i, r)
		}
	}
	closePooled(t, gs)
	require.NoError(t, gp.Close())
}

// poolKeepsOutputsFromLaterCaptures: a graph's output, still held when its
// capture ends, is not memory a later capture of the pool may take.
func (s *suite) poolKeepsOutputsFromLaterCaptures(t *testing.T) {
	e := s.env(t)
	gp := e.a.NewGraphPool()
	const n = 4 * poolUnit
	warm := mustAlloc(t, e.a, 2*n)
	require.NoError(t, e.a.Free(warm))
	var out alloc.Buffer
	want := pattern(n, 41)
	src := mustAlloc(t, e.a, n)
	upload(t, e.a, src, 0, want)
	g1, err := e.a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error {
		var err error
		if out, err = e.a.Alloc(n); err != nil {
			return err
		}
		return e.a.Copy(out, 0, src, 0, n) // the graph's output: still held when the capture ends
	})
	require.NoError(t, err)
	g2, err := e.a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error {
		tmp, err := e.a.Alloc(n)
		if err != nil {
			return err
		}
		return errors.Join(e.a.Memset(tmp, 0, 0xEE, n), e.a.Free(tmp))
	})
	require.NoError(t, err)
	require.Empty(t, g2.Warnings())
	launch(t, e.a, g1)
	for range 3 {
		launch(t, e.a, g2)
	}
	require.Equal(t, want, download(t, e.a, out, 0, n), "a later graph of the pool overwrote an earlier graph's output")
	requireRefused(t, e.a.Free(out), alloc.StateNone, alloc.ErrInvalidBuffer)
	require.NoError(t, g1.Close())
	require.NoError(t, g2.Close())
	require.NoError(t, gp.Close())
	require.NoError(t, e.a.Free(src))
}

// poolOfOtherAllocatorOrClosedRefused: a capture into another allocator's
// pool or a closed pool is refused before the driver, runs nothing and
// counts no failed capture; both allocators still capture, the foreign
// pool for its own.
func (s *suite) poolOfOtherAllocatorOrClosedRefused(t *testing.T) {
	e := s.env(t)
	other := e.newAllocator(alloc.Options{})
	foreign := other.NewGraphPool()
	closed := e.a.NewGraphPool()
	require.NoError(t, closed.Close())
	for _, c := range []struct {
		name string
		gp   *alloc.GraphPool
		want error
	}{{"other_allocators_pool", foreign, alloc.ErrInvalidValue}, {"closed_pool", closed, alloc.ErrClosed}} {
		t.Run(c.name, func(t *testing.T) {
			before := e.spy.Snapshot()
			ran := false
			_, err := e.a.WithCapture(alloc.CaptureOptions{Pool: c.gp}, func() error { ran = true; return nil })
			requireRefused(t, err, alloc.StateNone, c.want)
			assert.False(t, ran)
			assertNoDriverCall(t, e.spy, before)
			requireState(t, e.a, alloc.StateNone)
			assert.Zero(t, e.a.Stats().FailedCapture)
		})
	}
	// Both allocators still capture, the foreign pool for its own.
	p := newProgram(t, other, 2*poolUnit)
	_, err := p.eager()
	require.NoError(t, err)
	pg := capturePooled(t, p, foreign, alloc.Global)
	require.NoError(t, checkFreshReplays(p, pg.g, 2, 5))
	closePooled(t, []pooledGraph{pg})
	require.NoError(t, foreign.Close())
}

// poolMemoryBackAfterBothClosed: while a graph of the pool lives or the
// pool is open, eager allocations of every size the pool holds get other
// memory; once the pool and its last graph are closed (in either order)
// the pool's memory is the allocator's cache again.
func (s *suite) poolMemoryBackAfterBothClosed(t *testing.T, poolFirst bool) {
	e := s.env(t)
	gp := e.a.NewGraphPool()
	gs := captureSteps(t, warmSteps(t, e.a, 2), gp, alloc.Global)
	held := gp.Bytes()
	cached := e.a.Stats().BytesCached
	if poolFirst {
		require.NoError(t, gp.Close())
	}
	require.NoError(t, gs[0].g.Close())
	// A graph of the pool lives (or the pool is open): eager
	// allocations of every size the pool holds get other memory.
	for _, n := range []int64{poolUnit, 2 * poolUnit, held} {
		b := mustAlloc(t, e.a, n)
		for _, pg := range gs {
			assert.False(t, overlaps(b.Ptr(), b.Size(), pg.taken.Ptr(), pg.taken.Size()), "an eager allocation of %d B was given the pool's memory", n)
		}
		require.NoError(t, e.a.Free(b))
	}
	require.Equal(t, held, gp.Bytes())
	require.NoError(t, gs[1].g.Close())
	if !poolFirst {
		require.Equal(t, held, gp.Bytes(), "the pool is open: it keeps its memory for its next capture")
		require.NoError(t, gp.Close())
	}
	require.Zero(t, gp.Bytes())
	assert.GreaterOrEqual(t, e.a.Stats().BytesCached, cached+held, "the pool's memory is not the allocator's cache again")
	for _, pg := range gs {
		pg.p.close(t)
	}
}

// poolInterleavesWithEagerWorkAndOtherCaptures: eager work and a capture
// outside the pool between the pool's captures; the pool's second capture
// reuses the first's memory, and no replay overwrites another's data or
// the eager buffer.
func (s *suite) poolInterleavesWithEagerWorkAndOtherCaptures(t *testing.T) {
	e := s.env(t)
	gp := e.a.NewGraphPool()
	big := newProgram(t, e.a, 3*poolUnit)
	_, err := big.eager()
	require.NoError(t, err)
	g1 := capturePooled(t, big, gp, alloc.Global)
	eager := mustAlloc(t, e.a, poolUnit) // eager work between the pool's captures
	upload(t, e.a, eager, 0, pattern(poolUnit, 3))
	plain := newProgram(t, e.a, 2*poolUnit)
	_, err = plain.eager()
	require.NoError(t, err)
	other := captureProgram(t, plain, alloc.ThreadLocal) // a capture outside the pool
	small := newProgram(t, e.a, poolUnit)
	g2 := capturePooled(t, small, gp, alloc.Relaxed)
	assert.True(t, overlaps(g1.taken.Ptr(), g1.taken.Size(), g2.taken.Ptr(), g2.taken.Size()), "the pool's second capture did not reuse the first's memory")
	for r := range 4 {
		require.NoError(t, checkFreshReplays(big, g1.g, 1, uint64(10*r)))
		require.NoError(t, checkFreshReplays(plain, other, 1, uint64(10*r+1)))
		require.NoError(t, checkFreshReplays(small, g2.g, 1, uint64(10*r+2)))
	}
	require.True(t, bytes.Equal(pattern(poolUnit, 3), download(t, e.a, eager, 0, poolUnit)), "the pool's replays overwrote an eager buffer")
	closePooled(t, []pooledGraph{g1, g2})
	require.NoError(t, other.Close())
	plain.close(t)
	require.NoError(t, e.a.Free(eager))
	require.NoError(t, gp.Close())
}
