package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// The capture contract of docs/design.md, one subtest per cell:
// TruthTable/<mode>/<state>/<operation>.

const (
	ttSize   = 4096
	ttSeed   = 1
	wsName   = "reserved"
	lazyName = "lazy"
)

// cell is the world of one truth-table subtest.
type cell struct {
	t     *testing.T
	e     *env
	a     *alloc.Allocator
	spy   *alloctest.Spy
	mode  alloc.CaptureMode
	state alloc.CaptureState

	pre      alloc.Buffer      // allocated and filled before the capture
	preFreed bool              // the operation freed pre
	host     *alloc.HostBuffer // pinned, ttSize bytes
	ws       alloc.Buffer      // workspace reserved before the capture
	captured alloc.Buffer      // allocated inside the capture (set by the operation)
	old      *alloc.Graph      // an earlier graph, owner of oldBuf
	oldBuf   alloc.Buffer
	before   alloctest.Counts // spy counters just before the operation

	graphClosed bool // verify closed the capture's graph itself
}

// ttOp is one row of the table.
type ttOp struct {
	name string
	// prepare runs before the state is entered.
	prepare func(c *cell)
	// inCapture runs right after BeginCapture, before an invalidation.
	inCapture func(c *cell)
	// act performs the operation in c.state and checks its immediate result.
	act func(c *cell)
	// verify runs after the state was left (g is the graph of an Active
	// capture, nil otherwise) and checks the operation's lasting effect.
	verify func(c *cell, g *alloc.Graph)
}

func (s *suite) truthTable(t *testing.T) {
	inEachMode(func(t *testing.T, mode alloc.CaptureMode) {
		for _, st := range []alloc.CaptureState{alloc.StateNone, alloc.StateActive, alloc.StateExternal, alloc.StateInvalidated} {
			t.Run(st.String(), func(t *testing.T) {
				for _, op := range ttOps {
					t.Run(op.name, func(t *testing.T) { s.runCell(t, mode, st, op) })
				}
			})
		}
	})(t)
}

func (s *suite) runCell(t *testing.T, mode alloc.CaptureMode, st alloc.CaptureState, op ttOp) {
	e := s.env(t)
	c := &cell{t: t, e: e, a: e.a, spy: e.spy, mode: mode, state: st}
	c.pre = mustAlloc(t, c.a, ttSize)
	upload(t, c.a, c.pre, 0, pattern(ttSize, ttSeed))
	c.host = mustHost(t, c.a, ttSize)
	ws, err := c.a.Workspace(wsName, ttSize)
	require.NoError(t, err)
	c.ws = ws
	require.NoError(t, c.a.Synchronize())
	if op.prepare != nil {
		op.prepare(c)
	}

	c.enter(op.inCapture)
	requireState(t, c.a, st)
	c.before = c.spy.Snapshot()
	op.act(c)
	g := c.leave()
	if op.verify != nil {
		op.verify(c, g)
	}
	if g != nil && !c.graphClosed {
		require.NoError(t, g.Close())
	}
	c.release()
}

// enter brings the allocator's stream into c.state.
func (c *cell) enter(inCapture func(*cell)) {
	t := c.t
	switch c.state {
	case alloc.StateActive:
		require.NoError(t, c.a.BeginCapture(c.mode))
	case alloc.StateExternal:
		// Someone calls the vendor API directly, behind the allocator's back.
		require.NoError(t, c.spy.Inner().BeginCapture(c.a.Stream(), c.mode))
	case alloc.StateInvalidated:
		require.NoError(t, c.a.BeginCapture(c.mode))
		if inCapture != nil {
			inCapture(c)
		}
		invalidate(t, c.e, c.a)
	}
}

// leave ends c.state and checks the allocator is back to StateNone.
func (c *cell) leave() *alloc.Graph {
	t := c.t
	var g *alloc.Graph
	switch c.state {
	case alloc.StateActive:
		var err error
		g, err = c.a.EndCapture()
		require.NoError(t, err, "the capture must still be valid after the operation")
		require.NotNil(t, g)
	case alloc.StateExternal:
		h, err := c.spy.Inner().EndCapture(c.a.Stream())
		require.NoError(t, err, "the external capture must still be valid after the refused operation")
		require.NoError(t, c.spy.Inner().GraphDestroy(h))
	case alloc.StateInvalidated:
		_, err := c.a.EndCapture()
		requireRefused(t, err, alloc.StateInvalidated, alloc.ErrCaptureInvalidated)
	}
	requireState(t, c.a, alloc.StateNone)
	return g
}

// release gives back what the cell set up; the env cleanup then checks the
// allocator closes without a leak.
func (c *cell) release() {
	t := c.t
	if !c.preFreed {
		require.NoError(t, c.a.Free(c.pre))
	}
	if c.old != nil {
		require.NoError(t, c.old.Close())
	}
	require.NoError(t, c.a.ReleaseWorkspace(wsName))
	require.NoError(t, c.host.Close())
	require.NoError(t, c.a.Synchronize())
}

// refused asserts the operation was refused with the state's error and made
// no driver call. sync says it is a synchronize or query.
func (c *cell) refused(err error, sync bool) {
	c.t.Helper()
	switch {
	case sync && c.state == alloc.StateInvalidated:
		requireRefused(c.t, err, c.state, alloc.ErrSyncDuringCapture, alloc.ErrCaptureInvalidated)
	case sync:
		requireRefused(c.t, err, c.state, alloc.ErrSyncDuringCapture)
	case c.state == alloc.StateInvalidated:
		requireRefused(c.t, err, c.state, alloc.ErrCaptureInvalidated)
	default:
		requireRefused(c.t, err, c.state, alloc.ErrCaptureIncompatibleAllocation)
	}
	assertNoDriverCall(c.t, c.spy, c.before)
}

// preIntact asserts pre still holds its original bytes: a refused or not yet
// replayed operation changed nothing.
func (c *cell) preIntact(why string) {
	c.t.Helper()
	require.Equal(c.t, pattern(ttSize, ttSeed), download(c.t, c.a, c.pre, 0, ttSize), why)
}

// capturedOneAllocation asserts that what (the operation, in this
// capture) made one graph allocation: a cudaMallocAsync node, no
// cudaMalloc, counted by CaptureAllocCount.
func (c *cell) capturedOneAllocation(what string) {
	c.t.Helper()
	assertCalls(c.t, c.spy, c.before, alloctest.MethodMallocAsync, 1)
	assertCalls(c.t, c.spy, c.before, alloctest.MethodMalloc, 0)
	assert.Equal(c.t, 1, c.a.CaptureAllocCount(), "%s is counted", what)
}

// graphCountsOneAllocation reports whether the cell's capture made a graph
// (g is nil outside StateActive) and asserts that it holds one allocation.
func (c *cell) graphCountsOneAllocation(g *alloc.Graph) bool {
	c.t.Helper()
	if g == nil {
		return false
	}
	assert.Equal(c.t, 1, g.CaptureAllocCount())
	return true
}

// launch replays g and waits for it.
func launch(t *testing.T, a *alloc.Allocator, g *alloc.Graph) {
	t.Helper()
	require.NoError(t, g.Launch())
	require.NoError(t, a.Synchronize())
}

// actByState builds the act of a row whose operation do succeeds with no
// capture (none, if set, then checks its effect), is judged by active in
// the allocator's own capture, and is refused with no driver call in a
// foreign or invalidated one.
func actByState(do func(c *cell) error, none func(c *cell), active func(c *cell, err error)) func(c *cell) {
	return func(c *cell) {
		err := do(c)
		switch c.state {
		case alloc.StateNone:
			require.NoError(c.t, err)
			if none != nil {
				none(c)
			}
		case alloc.StateActive:
			active(c, err)
		default:
			c.refused(err, false)
		}
	}
}

// dataOp builds a row for a stream-ordered data operation (legal in None and
// Active, refused in External and Invalidated).
func dataOp(name string, do func(c *cell) error, none, active func(c *cell), verifyActive func(c *cell, g *alloc.Graph)) ttOp {
	return ttOp{
		name: name,
		act: actByState(do, none, func(c *cell, err error) {
			require.NoError(c.t, err)
			if active != nil {
				active(c)
			}
		}),
		verify: func(c *cell, g *alloc.Graph) {
			switch c.state {
			case alloc.StateActive:
				if verifyActive != nil {
					verifyActive(c, g)
				}
			case alloc.StateExternal, alloc.StateInvalidated:
				c.preIntact("a refused operation must not have touched memory")
			}
		},
	}
}

// pageableOp builds a row for a blocking copy with pageable memory: legal
// only with no capture at all.
func pageableOp(name string, do func(c *cell) error, none func(c *cell)) ttOp {
	return ttOp{
		name: name,
		act: actByState(do, none, func(c *cell, err error) {
			c.refused(err, false)
			assert.Contains(c.t, err.Error(), "pageable", "the error must say why: pageable memory")
			requireState(c.t, c.a, alloc.StateActive)
		}),
		verify: func(c *cell, g *alloc.Graph) {
			if g != nil {
				launch(c.t, c.a, g)
			}
			if c.state != alloc.StateNone {
				c.preIntact("a refused pageable copy must not have touched memory")
			}
		},
	}
}

// syncOp builds a row for Synchronize or Query: waits with no capture,
// refused (capture left valid) in every capture state.
func syncOp(name string, do func(c *cell) error) ttOp {
	return ttOp{
		name: name,
		act: func(c *cell) {
			err := do(c)
			if c.state == alloc.StateNone {
				require.NoError(c.t, err)
				assertCalls(c.t, c.spy, c.before, alloctest.MethodStreamSynchronize, callsOf(name, alloctest.MethodStreamSynchronize))
				assertCalls(c.t, c.spy, c.before, alloctest.MethodStreamQuery, callsOf(name, alloctest.MethodStreamQuery))
				return
			}
			c.refused(err, true)
			if c.state != alloc.StateInvalidated {
				// No driver call was made, so the capture is still valid.
				requireState(c.t, c.a, c.state)
			}
		},
	}
}

// callsOf is how many calls of m the named sync operation makes.
func callsOf(op string, m alloctest.Method) int64 {
	if (op == "synchronize" && m == alloctest.MethodStreamSynchronize) || (op == "query" && m == alloctest.MethodStreamQuery) {
		return 1
	}
	return 0
}

var ttOps = []ttOp{
	{
		name: "alloc",
		act: func(c *cell) {
			b, err := c.a.Alloc(1000)
			switch c.state {
			case alloc.StateNone:
				require.NoError(c.t, err)
				assert.Equal(c.t, int64(1000), b.Size())
				require.NoError(c.t, c.a.Free(b))
			case alloc.StateActive:
				require.NoError(c.t, err)
				c.capturedOneAllocation("an allocation in capture")
				c.captured = b
			default:
				c.refused(err, false)
			}
		},
		verify: func(c *cell, g *alloc.Graph) {
			if !c.graphCountsOneAllocation(g) {
				return
			}
			launch(c.t, c.a, g)
			// The address belongs to the graph until Graph.Close.
			requireRefused(c.t, c.a.Free(c.captured), alloc.StateNone, alloc.ErrInvalidBuffer)
		},
	},
	{
		name: "free_precapture",
		act: func(c *cell) {
			err := c.a.Free(c.pre)
			switch c.state {
			case alloc.StateNone, alloc.StateActive:
				require.NoError(c.t, err)
				c.preFreed = true
				if c.state == alloc.StateActive {
					// Deferred: the graph may still touch it.
					assertNoDriverCall(c.t, c.spy, c.before)
				}
				requireRefused(c.t, c.a.Free(c.pre), c.state, alloc.ErrInvalidBuffer)
			default:
				c.refused(err, false)
			}
		},
		verify: func(c *cell, g *alloc.Graph) {
			if g == nil {
				if c.state != alloc.StateNone {
					c.preIntact("a refused free must leave the buffer usable")
				}
				return
			}
			// Held until the graph closes: an allocation of the same size
			// made meanwhile must get other memory.
			b := mustAlloc(c.t, c.a, ttSize)
			assert.NotEqual(c.t, c.pre.Ptr(), b.Ptr(), "a buffer freed during capture was reused while its graph lives")
			require.NoError(c.t, c.a.Free(b))
		},
	},
	{
		name: "free_captured",
		prepare: func(c *cell) {
			if c.state == alloc.StateNone || c.state == alloc.StateExternal {
				// A buffer owned by an earlier graph.
				require.NoError(c.t, c.a.BeginCapture(c.mode))
				b, err := c.a.Alloc(1000)
				require.NoError(c.t, err)
				g, err := c.a.EndCapture()
				require.NoError(c.t, err)
				c.old, c.oldBuf = g, b
			}
		},
		inCapture: func(c *cell) {
			b, err := c.a.Alloc(1000)
			require.NoError(c.t, err)
			c.captured = b
		},
		act: func(c *cell) {
			var err error
			switch c.state {
			case alloc.StateNone:
				err = c.a.Free(c.oldBuf)
				requireRefused(c.t, err, c.state, alloc.ErrInvalidBuffer)
				assertNoDriverCall(c.t, c.spy, c.before)
			case alloc.StateActive:
				b, aerr := c.a.Alloc(1000)
				require.NoError(c.t, aerr)
				c.before = c.spy.Snapshot()
				require.NoError(c.t, c.a.Free(b))
				assertCalls(c.t, c.spy, c.before, alloctest.MethodFreeAsync, 1)
				requireRefused(c.t, c.a.Free(b), c.state, alloc.ErrInvalidBuffer)
			case alloc.StateExternal:
				c.refused(c.a.Free(c.oldBuf), false)
			case alloc.StateInvalidated:
				c.refused(c.a.Free(c.captured), false)
			}
		},
		verify: func(c *cell, g *alloc.Graph) {
			if c.graphCountsOneAllocation(g) {
				launch(c.t, c.a, g)
				launch(c.t, c.a, g)
			}
		},
	},
	dataOp("upload_host",
		func(c *cell) error {
			copy(c.host.Bytes(), pattern(ttSize, 2))
			return c.a.UploadHost(c.pre, 0, c.host, 0, ttSize)
		},
		func(c *cell) {
			require.NoError(c.t, c.a.Synchronize())
			require.Equal(c.t, pattern(ttSize, 2), download(c.t, c.a, c.pre, 0, ttSize))
		},
		func(c *cell) { assertCalls(c.t, c.spy, c.before, alloctest.MethodCopyHtoDAsync, 1) },
		func(c *cell, g *alloc.Graph) {
			c.preIntact("a captured copy must not run before launch")
			// Replays read the host buffer's bytes at launch time.
			copy(c.host.Bytes(), pattern(ttSize, 3))
			launch(c.t, c.a, g)
			require.Equal(c.t, pattern(ttSize, 3), download(c.t, c.a, c.pre, 0, ttSize))
		}),
	pageableOp("upload_pageable",
		func(c *cell) error { return c.a.Upload(c.pre, 0, pattern(ttSize, 4)) },
		func(c *cell) { require.Equal(c.t, pattern(ttSize, 4), download(c.t, c.a, c.pre, 0, ttSize)) }),
	{
		name: "download_host",
		act: func(c *cell) {
			fill(c.host.Bytes(), 0xEE)
			err := c.a.DownloadHost(c.host, 0, c.pre, 0, ttSize)
			switch c.state {
			case alloc.StateNone:
				require.NoError(c.t, err)
				require.NoError(c.t, c.a.Synchronize())
				require.Equal(c.t, pattern(ttSize, ttSeed), c.host.Bytes())
			case alloc.StateActive:
				require.NoError(c.t, err)
				assertCalls(c.t, c.spy, c.before, alloctest.MethodCopyDtoHAsync, 1)
			default:
				c.refused(err, false)
			}
		},
		verify: func(c *cell, g *alloc.Graph) {
			switch {
			case g != nil:
				require.NoError(c.t, c.a.Synchronize())
				assert.Equal(c.t, repeat(0xEE, ttSize), c.host.Bytes(), "a captured copy must not run before launch")
				launch(c.t, c.a, g)
				require.Equal(c.t, pattern(ttSize, ttSeed), c.host.Bytes())
			case c.state != alloc.StateNone:
				require.NoError(c.t, c.a.Synchronize())
				require.Equal(c.t, repeat(0xEE, ttSize), c.host.Bytes(), "a refused download must not write the host buffer")
			}
		},
	},
	pageableOp("download_pageable",
		func(c *cell) error {
			out := repeat(0xEE, ttSize)
			err := c.a.Download(out, c.pre, 0)
			if err == nil {
				require.Equal(c.t, pattern(ttSize, ttSeed), out)
			} else {
				require.Equal(c.t, repeat(0xEE, ttSize), out, "a refused download must not write its destination")
			}
			return err
		},
		func(c *cell) {}),
	dataOp("memset",
		func(c *cell) error { return c.a.Memset(c.pre, 10, 0x7F, 100) },
		func(c *cell) {
			want := pattern(ttSize, ttSeed)
			fill(want[10:110], 0x7F)
			require.Equal(c.t, want, download(c.t, c.a, c.pre, 0, ttSize))
		},
		func(c *cell) { assertCalls(c.t, c.spy, c.before, alloctest.MethodMemsetAsync, 1) },
		func(c *cell, g *alloc.Graph) {
			c.preIntact("a captured memset must not run before launch")
			launch(c.t, c.a, g)
			want := pattern(ttSize, ttSeed)
			fill(want[10:110], 0x7F)
			require.Equal(c.t, want, download(c.t, c.a, c.pre, 0, ttSize))
		}),
	hostFuncRow,
	syncOp("synchronize", func(c *cell) error { return c.a.Synchronize() }),
	syncOp("query", func(c *cell) error {
		done, err := c.a.Query()
		if err == nil {
			assert.True(c.t, done, "nothing is queued")
		}
		return err
	}),
	{
		name: "workspace_reserved",
		act: func(c *cell) {
			b, err := c.a.Workspace(wsName, ttSize/2)
			require.NoError(c.t, err, "a reserved workspace is returned in every state")
			assert.Equal(c.t, c.ws.Ptr(), b.Ptr())
			assert.GreaterOrEqual(c.t, b.Size(), int64(ttSize/2))
			assertNoDriverCall(c.t, c.spy, c.before)
			assert.Zero(c.t, c.a.CaptureAllocCount(), "a reserved workspace costs no allocation")
		},
	},
	{
		name: "workspace_lazy",
		act: func(c *cell) {
			b, err := c.a.Workspace(lazyName, 2048)
			switch c.state {
			case alloc.StateNone:
				require.NoError(c.t, err)
				again, err := c.a.Workspace(lazyName, 1024)
				require.NoError(c.t, err)
				assert.Equal(c.t, b.Ptr(), again.Ptr())
				requireRefused(c.t, c.a.Free(b), c.state, alloc.ErrInvalidBuffer) // ReleaseWorkspace, not Free
				require.NoError(c.t, c.a.ReleaseWorkspace(lazyName))
			case alloc.StateActive:
				require.NoError(c.t, err)
				c.capturedOneAllocation("a workspace first used in capture")
			default:
				c.refused(err, false)
			}
		},
		verify: func(c *cell, g *alloc.Graph) {
			if !c.graphCountsOneAllocation(g) {
				return
			}
			w := g.Warnings()
			require.Len(c.t, w, 1, "a lazy workspace is warned about at EndCapture")
			assert.Contains(c.t, w[0], lazyName)
			assert.Contains(c.t, c.e.logs.String(), lazyName, "and logged")
			launch(c.t, c.a, g)
		},
	},
	{
		name: "alloc_sync",
		act: func(c *cell) {
			b, err := c.a.AllocSync(1000)
			// Strict capture safety (docs/capture-safety.md) refuses it
			// during any capture, Relaxed included.
			strict := strictSafety(c.a)
			relaxedOK := c.state == alloc.StateActive && c.mode == alloc.Relaxed
			allowed := c.state == alloc.StateNone || (relaxedOK && !strict)
			if !allowed {
				c.refused(err, false)
				if relaxedOK {
					requireStrictRefusal(c.t, err)
				}
				return
			}
			require.NoError(c.t, err, "cudaMalloc is legal with no capture and in a relaxed capture")
			assertCalls(c.t, c.spy, c.before, alloctest.MethodMalloc, 1)
			if c.state == alloc.StateActive {
				assert.Equal(c.t, 1, c.a.CaptureAllocCount())
				requireState(c.t, c.a, alloc.StateActive)
				// Freed during the capture: deferred, no synchronous cudaFree.
				before := c.spy.Snapshot()
				require.NoError(c.t, c.a.Free(b))
				assertCalls(c.t, c.spy, before, alloctest.MethodFree, 0)
				return
			}
			data := pattern(1000, 6)
			upload(c.t, c.a, b, 0, data)
			require.Equal(c.t, data, download(c.t, c.a, b, 0, 1000))
			require.NoError(c.t, c.a.Free(b))
			assertCalls(c.t, c.spy, c.before, alloctest.MethodFree, 1)
		},
		verify: func(c *cell, g *alloc.Graph) {
			if g == nil || c.mode != alloc.Relaxed || strictSafety(c.a) {
				return // no AllocSync buffer: refused (strict) or freed already
			}
			before := c.spy.Snapshot()
			require.NoError(c.t, g.Close())
			c.graphClosed = true
			assertCalls(c.t, c.spy, before, alloctest.MethodFree, 1) // the deferred free happens now
		},
	},
}
