package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// migration: the behaviours an engine moving from zerfoo/ztensor meets
// where capalloc differs, one subtest per entry of
// docs/migrating-from-ztensor.md ("Differences an engine hits"). A
// subtest's name is the guide's anchor for it: rename both together.
func (s *suite) migration(t *testing.T) {
	runRules(t,
		rule{"pageable_upload_refused_in_capture", inEachMode(s.pageableUploadRefusedInCapture)},
		rule{"eager_fallback_only_when_capture_unavailable", s.eagerFallbackOnlyWhenCaptureUnavailable},
		rule{"capture_alloc_count_counts_allocations_made", s.captureAllocCountCountsAllocationsMade},
		rule{"lazy_workspace_allocated_into_graph_with_warning", s.lazyWorkspaceAllocatedIntoGraphWithWarning},
		rule{"zero_stream_is_invalid_value", s.zeroStreamIsInvalidValue},
		rule{"panic_inside_capture_ends_it", s.panicInsideCaptureEndsIt},
	)
}

// pageableUploadRefusedInCapture: ztensor records a copy from a Go slice
// into the graph, and every replay reads that slice again. capalloc
// refuses the pageable copy before the driver, in every mode, and leaves
// the capture valid; the replacement is a HostBuffer, whose bytes each
// replay reads.
func (s *suite) pageableUploadRefusedInCapture(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 4096)
	h := mustHost(t, e.a, 4096)
	require.NoError(t, e.a.BeginCapture(mode))
	before := e.spy.Snapshot()
	requireRefused(t, e.a.Upload(b, 0, repeat(1, 4096)), alloc.StateActive, alloc.ErrCaptureIncompatibleAllocation)
	assertNoDriverCall(t, e.spy, before)
	requireState(t, e.a, alloc.StateActive) // the refusal did not invalidate the capture
	require.NoError(t, e.a.UploadHost(b, 0, h, 0, 4096), "the replacement: a stream-ordered copy from pinned memory")
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	for _, v := range []byte{7, 8} {
		fill(h.Bytes(), v) // written before the launch: the replay reads it
		launch(t, e.a, g)
		require.Equal(t, repeat(v, 4096), download(t, e.a, b, 0, 4096), "replay copies the HostBuffer's bytes at replay time")
	}
	require.NoError(t, g.Close())
	require.NoError(t, h.Close())
	require.NoError(t, e.a.Free(b))
}

// eagerFallbackOnlyWhenCaptureUnavailable: ztensor's CaptureSafe reruns
// the function uncaptured when the capture meets an incompatible
// allocation. capalloc's EagerFallback covers only a driver that cannot
// capture (ErrCaptureUnavailable): a refusal inside the capture fails
// WithCapture, runs nothing eagerly and leaves no graph.
func (s *suite) eagerFallbackOnlyWhenCaptureUnavailable(t *testing.T) {
	runRules(t,
		rule{"refusal_inside_capture_is_returned", s.refusalInsideCaptureIsReturned},
		rule{"driver_without_capture_runs_eagerly", s.driverWithoutCaptureRunsEagerly},
	)
}

func (s *suite) refusalInsideCaptureIsReturned(t *testing.T) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 1000)
	upload(t, e.a, b, 0, repeat(0, 1000))
	base := e.a.Stats()
	calls := 0
	g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error {
		calls++
		return e.a.Upload(b, 0, repeat(3, 1000))
	})
	require.ErrorIs(t, err, alloc.ErrCaptureIncompatibleAllocation)
	require.Nil(t, g)
	assert.Equal(t, 1, calls, "the function ran once, in the capture, and was not rerun eagerly")
	assert.Equal(t, base.FailedCapture+1, e.a.Stats().FailedCapture)
	assert.Equal(t, base.LiveGraphs, e.a.Stats().LiveGraphs)
	requireState(t, e.a, alloc.StateNone)
	require.Equal(t, repeat(0, 1000), download(t, e.a, b, 0, 1000), "nothing ran eagerly")
	require.NoError(t, e.a.Free(b))
}

func (s *suite) driverWithoutCaptureRunsEagerly(t *testing.T) {
	e := s.env(t)
	e.spy.FailBeginCapture(errNoCapture)
	calls := 0
	g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error { calls++; return nil })
	require.NoError(t, err)
	assert.True(t, g.Eager())
	assert.Equal(t, 1, calls)
	require.NoError(t, g.Close())
}

// captureAllocCountCountsAllocationsMade: ztensor counts allocation
// attempts in the capture, refused ones included, and resets the count at
// EndCapture. capalloc counts the allocations the capture made (graph
// allocations; in a Relaxed capture also an AllocSync the rules let
// through), never a refusal, keeps the count of the last capture once it
// ended, and starts again from zero at the next BeginCapture.
func (s *suite) captureAllocCountCountsAllocationsMade(t *testing.T) {
	e := s.env(t)
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	_, err := e.a.AllocSync(4096)
	requireRefused(t, err, alloc.StateActive, alloc.ErrCaptureIncompatibleAllocation)
	assert.Zero(t, e.a.CaptureAllocCount(), "a refused allocation is not counted")
	_, err = e.a.Alloc(4096)
	require.NoError(t, err)
	_, err = e.a.Alloc(100)
	require.NoError(t, err)
	assert.Equal(t, 2, e.a.CaptureAllocCount(), "graph allocations are counted")
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	assert.Equal(t, 2, e.a.CaptureAllocCount(), "the last capture's count stays after EndCapture")
	assert.Equal(t, 2, g.CaptureAllocCount())
	require.NoError(t, g.Close())
	assert.Equal(t, 2, e.a.CaptureAllocCount(), "closing the graph does not reset it")
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	assert.Zero(t, e.a.CaptureAllocCount(), "a new capture starts from zero")
	g, err = e.a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	relaxedAllocSyncCountedIffMade(t, e)
}

// relaxedAllocSyncCountedIffMade: in a Relaxed capture an AllocSync may
// reach the driver (CUDA's documented rule) or be refused (strict capture
// safety): counted when made, not when refused.
func relaxedAllocSyncCountedIffMade(t *testing.T, e *env) {
	require.NoError(t, e.a.BeginCapture(alloc.Relaxed))
	sb, err := e.a.AllocSync(4096)
	want := 0
	if err == nil {
		want = 1
	} else {
		requireRefused(t, err, alloc.StateActive, alloc.ErrCaptureIncompatibleAllocation)
	}
	assert.Equal(t, want, e.a.CaptureAllocCount(), "an AllocSync in a Relaxed capture is counted iff it was made (err: %v)", err)
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	if want == 1 {
		require.NoError(t, e.a.Free(sb))
	}
}

// lazyWorkspaceAllocatedIntoGraphWithWarning: ztensor expects workspaces
// allocated before the capture. capalloc allocates a workspace first asked
// for inside its own capture into the graph, counts it, and warns
// (Graph.Warnings and the logger); no option refuses it instead (a known
// gap).
func (s *suite) lazyWorkspaceAllocatedIntoGraphWithWarning(t *testing.T) {
	e := s.env(t)
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		_, err := e.a.Workspace("scratch", 4096)
		return err
	})
	require.NoError(t, err, "a lazy workspace is not refused")
	assert.Equal(t, 1, g.CaptureAllocCount(), "it is a graph allocation")
	require.Len(t, g.Warnings(), 1)
	assert.Contains(t, g.Warnings()[0], `"scratch"`)
	assert.Contains(t, e.logs.String(), "scratch", "the warning is logged at EndCapture")
	require.NoError(t, g.Close())
	// The replacement: reserve it before capturing; the capture then
	// allocates nothing and warns of nothing.
	_, err = e.a.Workspace("scratch", 4096)
	require.NoError(t, err)
	g, err = e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		_, err := e.a.Workspace("scratch", 4096)
		return err
	})
	require.NoError(t, err)
	assert.Zero(t, g.CaptureAllocCount())
	assert.Empty(t, g.Warnings())
	require.NoError(t, g.Close())
	require.NoError(t, e.a.ReleaseWorkspace("scratch"))
}

// zeroStreamIsInvalidValue: ztensor treats a nil stream as "cannot be
// capturing". A capalloc driver knows only the streams it created: handle
// 0 is refused with ErrInvalidValue before the vendor runtime, even where
// the runtime would take it as the legacy default stream.
func (s *suite) zeroStreamIsInvalidValue(t *testing.T) {
	e := s.env(t)
	_, err := e.drv.StreamCaptureStatus(0)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.ErrorIs(t, e.drv.BeginCapture(0, alloc.Global), alloc.ErrInvalidValue)
	require.ErrorIs(t, e.drv.StreamSynchronize(0), alloc.ErrInvalidValue)
	requireState(t, e.a, alloc.StateNone) // nothing began
}

// panicInsideCaptureEndsIt: a panic in WithCapture's function ends the
// capture, releases what it allocated, counts a failed capture and is
// re-raised in the caller: the allocator is usable at once.
func (s *suite) panicInsideCaptureEndsIt(t *testing.T) {
	e := s.env(t)
	base := usageOf(e.a)
	failed := e.a.Stats().FailedCapture
	var p any
	func() {
		defer func() { p = recover() }()
		_, _ = e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
			if _, err := e.a.Alloc(4096); err != nil {
				return err
			}
			panic(errBoom)
		})
	}()
	err, _ := p.(error)
	require.True(t, errors.Is(err, errBoom), "the panic is re-raised in the caller, got %v", p)
	requireState(t, e.a, alloc.StateNone)
	assert.Equal(t, base, usageOf(e.a), "the capture's allocation was released")
	assert.Equal(t, failed+1, e.a.Stats().FailedCapture)
	require.NoError(t, e.a.Synchronize(), "no capture: synchronize is legal again")
	require.NoError(t, e.a.BeginCapture(alloc.Global), "a new capture can begin")
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
}
