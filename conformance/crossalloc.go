package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// CUDA's Global-mode rule: while any Global-mode capture is active, every
// thread in Global interaction mode is refused potentially unsafe calls, on
// any stream. Two allocators share one driver; A captures, B calls.

// unsafeCall is one of B's calls that a Global capture elsewhere forbids.
type unsafeCall struct {
	name string
	do   func(b *alloc.Allocator, buf alloc.Buffer) error
	// refusal is the sentinel B gets while A holds a Global capture.
	refusal error
	// strict: strict capture safety refuses it during a capture of any
	// mode (docs/capture-safety.md).
	strict bool
}

var unsafeCalls = []unsafeCall{
	{"alloc_sync", func(b *alloc.Allocator, _ alloc.Buffer) error {
		return allocThenFree(b.AllocSync, b, 1000)
	}, alloc.ErrCaptureIncompatibleAllocation, true},
	{"upload_pageable", func(b *alloc.Allocator, buf alloc.Buffer) error {
		return b.Upload(buf, 0, pattern(1000, 8))
	}, alloc.ErrCaptureIncompatibleAllocation, false},
	{"download_pageable", func(b *alloc.Allocator, buf alloc.Buffer) error {
		return b.Download(make([]byte, 1000), buf, 0)
	}, alloc.ErrCaptureIncompatibleAllocation, false},
	{"host_alloc", func(b *alloc.Allocator, _ alloc.Buffer) error {
		return hostAllocThenClose(b, 1000)
	}, alloc.ErrCaptureIncompatibleAllocation, true},
	{"synchronize", func(b *alloc.Allocator, _ alloc.Buffer) error {
		return b.Synchronize()
	}, alloc.ErrSyncDuringCapture, false},
	{"query", func(b *alloc.Allocator, _ alloc.Buffer) error {
		_, err := b.Query()
		return err
	}, alloc.ErrSyncDuringCapture, false},
}

func (s *suite) crossAllocator(t *testing.T) {
	runRules(t,
		rule{"global", s.globalCaptureRefusesSiblingsUnsafeCalls},
		rule{alloc.ThreadLocal.String(), s.nonGlobalCaptureLeavesSiblingsAlone(alloc.ThreadLocal)},
		rule{alloc.Relaxed.String(), s.nonGlobalCaptureLeavesSiblingsAlone(alloc.Relaxed)},
	)
}

// whileCapturing sets up A (capturing in mode) and B, runs check, and
// asserts A's capture survived whatever B did. Every allocator acts as a
// thread in Global interaction mode, CUDA's default.
func (s *suite) whileCapturing(t *testing.T, mode alloc.CaptureMode, check func(t *testing.T, e *env, b *alloc.Allocator, buf alloc.Buffer)) {
	e := s.env(t)
	b := e.newAllocator(alloc.Options{})
	buf := mustAlloc(t, b, 1000)
	require.NoError(t, b.Synchronize())
	require.NoError(t, e.a.BeginCapture(mode))
	check(t, e, b, buf)
	requireState(t, e.a, alloc.StateActive)
	g, err := e.a.EndCapture()
	require.NoError(t, err, "B's calls must not have invalidated A's capture")
	require.NoError(t, g.Close())
	require.NoError(t, b.Free(buf))
}

// globalCaptureRefusesSiblingsUnsafeCalls: while A holds a Global
// capture, B's unsafe calls are refused before the driver; its
// stream-ordered work, its own graphs and its cleanup go on without
// invalidating A's capture; after A's end all of B's calls run.
func (s *suite) globalCaptureRefusesSiblingsUnsafeCalls(t *testing.T) {
	var rules []rule
	for _, c := range unsafeCalls {
		rules = append(rules, rule{c.name + "_refused", func(t *testing.T) {
			s.whileCapturing(t, alloc.Global, func(t *testing.T, e *env, b *alloc.Allocator, buf alloc.Buffer) {
				before := e.spy.Snapshot()
				err := c.do(b, buf)
				requireRefused(t, err, alloc.StateNone, c.refusal)
				assertNoDriverCall(t, e.spy, before)
				requireState(t, b, alloc.StateNone)
			})
		}})
	}
	runRules(t, append(rules,
		rule{"pool_alloc_free_allowed", s.siblingsPoolAllocFreeAllowed},
		rule{"graph_capture_launch_close_allowed", s.siblingsGraphsAllowed},
		rule{"cleanup_never_invalidates", s.siblingsCleanupNeverInvalidates},
		rule{"allowed_after_end", s.siblingsUnsafeCallsAllowedAfterEnd},
	)...)
}

// siblingsPoolAllocFreeAllowed: stream-ordered work on B's own stream is
// not unsafe.
func (s *suite) siblingsPoolAllocFreeAllowed(t *testing.T) {
	s.whileCapturing(t, alloc.Global, func(t *testing.T, e *env, b *alloc.Allocator, _ alloc.Buffer) {
		var bufs []alloc.Buffer
		for _, n := range []int64{100, 5000, 1 << 20} {
			x, err := b.Alloc(n)
			require.NoError(t, err)
			require.NoError(t, b.Memset(x, 0, 0x5A, n))
			bufs = append(bufs, x)
		}
		freeAll(t, b, bufs)
	})
}

// siblingsGraphsAllowed: B captures, instantiates, launches and closes
// graphs of its own while A holds a Global capture. CUDA counts
// instantiation and exec destruction as unsafe (cmd/cudatruth); a driver
// must make them without invalidating A's capture.
func (s *suite) siblingsGraphsAllowed(t *testing.T) {
	e := s.env(t)
	b := e.newAllocator(alloc.Options{})
	buf := mustAlloc(t, b, 1000)
	memset := func(v byte) func() error { return func() error { return b.Memset(buf, 0, v, 1000) } }
	before, err := b.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, memset(1))
	require.NoError(t, err)
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	if strictSafety(b) {
		strictSiblingsGraphsWait(t, e, b, before, memset(2))
	} else {
		during, err := b.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, memset(2))
		require.NoError(t, err, "B's own capture and instantiation")
		require.NoError(t, before.Launch())
		require.NoError(t, during.Launch())
		require.NoError(t, before.Close())
		require.NoError(t, during.Close())
		requireState(t, e.a, alloc.StateActive)
		g, err := e.a.EndCapture()
		require.NoError(t, err, "B's graphs must not have invalidated A's capture")
		require.NoError(t, g.Close())
	}
	require.NoError(t, b.Synchronize())
	require.NoError(t, b.Free(buf))
}

// strictSiblingsGraphsWait: under strict capture safety B's instantiation
// is refused before the driver (its capture yields no graph), and the exec
// destroy of B's closed graph waits for A's capture to end.
func strictSiblingsGraphsWait(t *testing.T, e *env, b *alloc.Allocator, before *alloc.Graph, memset func() error) {
	calls := e.spy.Snapshot()
	_, err := b.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, memset)
	requireStrictRefusal(t, err) // B's instantiation
	require.NoError(t, before.Launch())
	require.NoError(t, before.Close())
	assertCalls(t, e.spy, calls, alloctest.MethodGraphInstantiate, 0)
	assertCalls(t, e.spy, calls, alloctest.MethodGraphExecDestroy, 0)
	requireState(t, e.a, alloc.StateActive)
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	eventually(t, "B's exec destroy ran after A's capture ended", func() bool {
		return e.spy.Snapshot().Sub(calls)[alloctest.MethodGraphExecDestroy] >= 2
	})
}

// siblingsCleanupNeverInvalidates: B's cleanup must free what it owes
// without invalidating A's capture: Close with a leaked host buffer and
// AllocSync buffer, and a graph whose close releases a deferred
// synchronous free. The frees wait for A's capture to end.
func (s *suite) siblingsCleanupNeverInvalidates(t *testing.T) {
	e := s.env(t)
	b := e.newAllocator(alloc.Options{})
	x, err := b.AllocSync(4096)
	require.NoError(t, err)
	pre, err := b.AllocSync(4096)
	require.NoError(t, err)
	gb, err := b.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
		if err := b.Memset(pre, 0, 3, 4096); err != nil {
			return err
		}
		return b.Free(pre) // deferred until gb closes
	})
	require.NoError(t, err)
	_, err = b.HostAlloc(4096) // leaked on purpose
	require.NoError(t, err)
	_ = x // leaked on purpose
	live, haveLive := liveBytes(e.drv)

	require.NoError(t, e.a.BeginCapture(alloc.Global))
	before := e.spy.Snapshot()
	require.NoError(t, gb.Close())
	require.ErrorIs(t, e.close(b), alloc.ErrLeaked)
	for _, m := range []alloctest.Method{alloctest.MethodFree, alloctest.MethodHostFree, alloctest.MethodStreamSynchronize} {
		assertCalls(t, e.spy, before, m, 0)
	}
	requireState(t, e.a, alloc.StateActive)
	g, err := e.a.EndCapture()
	require.NoError(t, err, "B's cleanup invalidated A's capture")
	require.NoError(t, g.Close())
	eventually(t, "B's deferred frees ran after A's capture ended", func() bool {
		c := e.spy.Snapshot().Sub(before)
		return c[alloctest.MethodFree] == 2 && c[alloctest.MethodHostFree] == 1 && c[alloctest.MethodDestroyStream] == 1
	})
	if haveLive {
		n, _ := liveBytes(e.drv)
		assert.Less(t, n, live, "B's memory was given back")
	}
}

func (s *suite) siblingsUnsafeCallsAllowedAfterEnd(t *testing.T) {
	e := s.env(t)
	b := e.newAllocator(alloc.Options{})
	buf := mustAlloc(t, b, 1000)
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	require.Error(t, b.Synchronize())
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	for _, c := range unsafeCalls {
		assert.NoError(t, c.do(b, buf), "%s after A's capture ended", c.name)
	}
	require.NoError(t, g.Close())
	require.NoError(t, b.Free(buf))
}

// nonGlobalCaptureLeavesSiblingsAlone: a ThreadLocal or Relaxed capture
// does not refuse B's unsafe calls, except those strict capture safety
// refuses during a capture of any mode, which name the profile.
func (s *suite) nonGlobalCaptureLeavesSiblingsAlone(mode alloc.CaptureMode) func(t *testing.T) {
	return func(t *testing.T) {
		for _, c := range unsafeCalls {
			t.Run(c.name+"_unaffected", func(t *testing.T) {
				s.whileCapturing(t, mode, func(t *testing.T, e *env, b *alloc.Allocator, buf alloc.Buffer) {
					if c.strict && strictSafety(b) {
						before := e.spy.Snapshot()
						err := c.do(b, buf)
						requireRefused(t, err, alloc.StateNone, c.refusal)
						requireStrictRefusal(t, err)
						assertNoDriverCall(t, e.spy, before)
						return
					}
					require.NoError(t, c.do(b, buf))
				})
			})
		}
	}
}
