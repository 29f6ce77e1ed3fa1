package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// A live graph has its addresses baked in: nothing it owns may be handed to
// anyone else until Graph.Close, or two tensors silently alias.

var aliasSizes = []int64{1, 256, 1000, 4096, 5000, 65536, 1 << 20}

// span is an address range some owner holds.
type span struct {
	p driver.DevicePtr
	n int64
}

// churn allocates and frees many buffers of aliasSizes eagerly (pool hits
// and misses, AllocSync too) and reports any that overlaps one of held.
func churn(t *testing.T, a *alloc.Allocator, held []span, rounds int) {
	t.Helper()
	var live []alloc.Buffer
	check := func(b alloc.Buffer) {
		for _, h := range held {
			assert.False(t, overlaps(b.Ptr(), b.Size(), h.p, h.n),
				"eager buffer %#x+%d overlaps graph-owned %#x+%d", b.Ptr(), b.Size(), h.p, h.n)
		}
	}
	for r := range rounds {
		for i, n := range aliasSizes {
			b := mustAlloc(t, a, n)
			check(b)
			live = append(live, b)
			if (r+i)%3 == 0 {
				sb, err := a.AllocSync(n)
				require.NoError(t, err)
				check(sb)
				live = append(live, sb)
			}
		}
		// Free every other buffer so later rounds hit the pool.
		keep := live[:0]
		for i, b := range live {
			if i%2 == 0 {
				require.NoError(t, a.Free(b))
			} else {
				keep = append(keep, b)
			}
		}
		live = keep
	}
	freeAll(t, a, live)
}

// warmPool leaves cached blocks of every alias size in the pool, so a
// careless pool would have something to hand out.
func warmPool(t *testing.T, a *alloc.Allocator) {
	t.Helper()
	var bs []alloc.Buffer
	for range 3 {
		for _, n := range aliasSizes {
			bs = append(bs, mustAlloc(t, a, n))
		}
	}
	freeAll(t, a, bs)
}

func (s *suite) aliasing(t *testing.T) {
	runRules(t,
		rule{"graph_buffers_never_handed_out", launchedOrNot(s.graphBuffersNeverHandedOut)},
		rule{"graph_memory_not_clobbered", s.graphMemoryNotClobbered},
		rule{"precapture_free_held_until_graph_close", s.precaptureFreeHeldUntilGraphClose},
		rule{"used_in_graph_then_freed_held_until_close", s.usedInGraphThenFreedHeldUntilClose},
		rule{"stats_back_to_baseline_after_close", launchedOrNot(s.statsBackToBaselineAfterClose)},
	)
}

// graphBuffersNeverHandedOut: no eager allocation, from the pool or the
// driver, overlaps what a live graph (launched or not) allocated.
func (s *suite) graphBuffersNeverHandedOut(t *testing.T, launched bool) {
	e := s.env(t)
	warmPool(t, e.a)
	var held []span
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
		for _, n := range aliasSizes {
			b, err := e.a.Alloc(n)
			if err != nil {
				return err
			}
			held = append(held, span{b.Ptr(), b.Size()})
		}
		return nil
	})
	require.NoError(t, err)
	if launched {
		launch(t, e.a, g)
	}
	churn(t, e.a, held, 20)
	require.NoError(t, g.Close())
}

// graphMemoryNotClobbered: the data-level view of the same rule: eager
// writes after a replay never reach a buffer the graph owns.
func (s *suite) graphMemoryNotClobbered(t *testing.T) {
	e := s.env(t)
	warmPool(t, e.a)
	const n = 65536
	in := mustHost(t, e.a, n)
	var owned alloc.Buffer
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		var err error
		if owned, err = e.a.Alloc(n); err != nil {
			return err
		}
		return e.a.UploadHost(owned, 0, in, 0, n)
	})
	require.NoError(t, err)
	want := pattern(n, 77)
	copy(in.Bytes(), want)
	launch(t, e.a, g)
	var bs []alloc.Buffer
	for range 4 {
		for _, sz := range aliasSizes {
			b := mustAlloc(t, e.a, sz)
			require.NoError(t, e.a.Memset(b, 0, 0xFF, sz))
			bs = append(bs, b)
		}
	}
	require.NoError(t, e.a.Synchronize())
	require.Equal(t, want, download(t, e.a, owned, 0, n), "eager writes reached graph-owned memory")
	freeAll(t, e.a, bs)
	require.NoError(t, g.Close())
	require.NoError(t, in.Close())
}

// precaptureFreeHeldUntilGraphClose: a buffer the capture uses and frees
// is neither reused inside the capture nor handed out while the graph
// lives; the graph's close releases it to the pool.
func (s *suite) precaptureFreeHeldUntilGraphClose(t *testing.T) {
	e := s.env(t)
	const n = 4096
	pre := mustAlloc(t, e.a, n)
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	require.NoError(t, e.a.Memset(pre, 0, 1, n)) // the graph uses pre
	require.NoError(t, e.a.Free(pre))
	in, err := e.a.Alloc(n)
	require.NoError(t, err)
	assert.False(t, overlaps(in.Ptr(), n, pre.Ptr(), n), "a capture allocation reused memory the capture still uses")
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	churn(t, e.a, []span{{pre.Ptr(), n}}, 10)
	require.NoError(t, g.Close())
	// Released by the close: the next allocation of its class reuses it
	// from the pool, with no driver call.
	assertReused(t, e, pre.Ptr(), n, "memory held for a closed graph is reusable")
}

// usedInGraphThenFreedHeldUntilClose: a buffer from before the capture,
// used by it and freed after EndCapture: its memory must not go back to
// the pool while the graph lives, or the next owner is overwritten at
// every Launch.
func (s *suite) usedInGraphThenFreedHeldUntilClose(t *testing.T) {
	for _, kind := range []string{"pooled", "alloc_sync"} {
		t.Run(kind, func(t *testing.T) { s.freedAfterCaptureHeldUntilClose(t, kind == "pooled") })
	}
}

func (s *suite) freedAfterCaptureHeldUntilClose(t *testing.T, pooled bool) {
	e := s.env(t)
	const n = 4096
	var pre alloc.Buffer
	if pooled {
		pre = mustAlloc(t, e.a, n)
	} else {
		var err error
		pre, err = e.a.AllocSync(n)
		require.NoError(t, err)
	}
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return e.a.Memset(pre, 0, 0xAA, n)
	})
	require.NoError(t, err)
	before := e.spy.Snapshot()
	require.NoError(t, e.a.Free(pre))
	assertNoDriverCall(t, e.spy, before) // held, not given back
	next := mustAlloc(t, e.a, n)
	assert.False(t, overlaps(next.Ptr(), n, pre.Ptr(), n), "memory a live graph uses was handed out again")
	want := pattern(n, 5)
	upload(t, e.a, next, 0, want)
	launch(t, e.a, g)
	require.Equal(t, want, download(t, e.a, next, 0, n), "a Launch overwrote the new owner")
	churn(t, e.a, []span{{pre.Ptr(), n}}, 5)
	require.NoError(t, e.a.Free(next))
	base := usageOf(e.a)
	require.NoError(t, g.Close())
	after := usageOf(e.a)
	assert.Equal(t, base.Graphs-1, after.Graphs)
	if pooled {
		// Released to the pool by the close: reused with no driver call.
		assertReused(t, e, pre.Ptr(), n, "memory held for a closed graph is reusable")
	} else {
		assert.Less(t, after.Reserved, base.Reserved, "the held synchronous buffer is freed by the close")
	}
}

// statsBackToBaselineAfterClose: a graph's memory is reserved while it
// lives, launched or not, and Stats return to the baseline at its close.
func (s *suite) statsBackToBaselineAfterClose(t *testing.T, launched bool) {
	e := s.env(t)
	warmPool(t, e.a)
	base := usageOf(e.a)
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Relaxed}, func() error {
		for i, n := range aliasSizes {
			b, err := e.a.Alloc(n)
			if err != nil {
				return err
			}
			if i%2 == 0 { // some freed inside the graph, some not
				if err := e.a.Free(b); err != nil {
					return err
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	during := usageOf(e.a)
	assert.Equal(t, base.Graphs+1, during.Graphs)
	assert.Greater(t, during.Reserved, base.Reserved, "graph memory is reserved while the graph lives")
	if launched {
		launch(t, e.a, g)
		launch(t, e.a, g)
	}
	require.NoError(t, g.Close())
	require.NoError(t, e.a.Synchronize())
	assert.Equal(t, base, usageOf(e.a))
}
