package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// Workspaces are the fix for the lazy-cudaMalloc-on-first-use hang: reserve
// before capturing and the capture allocates nothing.
func (s *suite) workspace(t *testing.T) {
	runRules(t,
		rule{"reserved_costs_nothing_in_capture", inEachMode(s.reservedWorkspaceCostsNothingInCapture)},
		rule{"lazy_lives_with_graph", s.lazyWorkspaceLivesWithGraph},
		rule{"grow_replaces", s.workspaceGrowReplaces},
		rule{"grow_refused_outside_own_capture", s.workspaceGrowRefusedOutsideOwnCapture},
		rule{"release_refused_in_capture_keeps_it", s.workspaceReleaseRefusedInCaptureKeepsIt},
	)
}

// workspaceNames are the workspaces reserved_costs_nothing_in_capture
// reserves, the i-th of 1000*(i+1) bytes.
var workspaceNames = []string{"attn", "gemm", "reduce"}

func (s *suite) reservedWorkspaceCostsNothingInCapture(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	for i, n := range workspaceNames {
		_, err := e.a.Workspace(n, int64(1000*(i+1)))
		require.NoError(t, err)
	}
	before := e.spy.Snapshot()
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
		var errs []error
		for i, n := range workspaceNames {
			w, err := e.a.Workspace(n, int64(1000*(i+1)))
			errs = append(errs, err)
			if err == nil {
				errs = append(errs, e.a.Memset(w, 0, byte(i), w.Size()))
			}
		}
		return errors.Join(errs...)
	})
	require.NoError(t, err)
	assert.Zero(t, e.a.CaptureAllocCount())
	assert.Zero(t, g.CaptureAllocCount())
	assert.Empty(t, g.Warnings())
	assertNoDeviceAllocation(t, e.spy, before)
	launch(t, e.a, g)
	for i, n := range workspaceNames {
		w, err := e.a.Workspace(n, 1)
		require.NoError(t, err)
		require.Equal(t, repeat(byte(i), int(w.Size())), download(t, e.a, w, 0, w.Size()))
	}
	require.NoError(t, g.Close())
	for _, n := range workspaceNames {
		require.NoError(t, e.a.ReleaseWorkspace(n))
	}
}

// lazyWorkspaceLivesWithGraph: a workspace first asked for inside the
// capture is the graph's memory (counted, warned of), returned as is while
// the graph lives and gone with it.
func (s *suite) lazyWorkspaceLivesWithGraph(t *testing.T) {
	e := s.env(t)
	var w alloc.Buffer
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		var err error
		w, err = e.a.Workspace("late", 4096)
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, 1, g.CaptureAllocCount())
	require.Len(t, g.Warnings(), 1)
	assert.Contains(t, g.Warnings()[0], "late")
	// While the graph lives, the workspace is its memory, returned as is.
	again, err := e.a.Workspace("late", 4096)
	require.NoError(t, err)
	assert.Equal(t, w.Ptr(), again.Ptr())
	require.NoError(t, g.Close())
	// Gone with the graph: the next use allocates afresh, outside it.
	fresh, err := e.a.Workspace("late", 4096)
	require.NoError(t, err)
	require.NoError(t, e.a.Upload(fresh, 0, pattern(4096, 4)), "the new workspace is usable")
	require.NoError(t, e.a.ReleaseWorkspace("late"))
}

func (s *suite) workspaceGrowReplaces(t *testing.T) {
	e := s.env(t)
	small, err := e.a.Workspace("w", 1000)
	require.NoError(t, err)
	big, err := e.a.Workspace("w", 100000)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, big.Size(), int64(100000))
	assert.Equal(t, 1, e.a.Stats().LiveBuffers, "the smaller workspace was released")
	requireRefused(t, e.a.Upload(small, 0, []byte{1}), alloc.StateNone, alloc.ErrInvalidBuffer)
	require.NoError(t, e.a.ReleaseWorkspace("w"))
	assert.Zero(t, e.a.Stats().LiveBuffers)
}

func (s *suite) workspaceGrowRefusedOutsideOwnCapture(t *testing.T) {
	e := s.env(t)
	w, err := e.a.Workspace("w", 1000)
	require.NoError(t, err)
	e.inExternalCapture(alloc.Global, func() {
		before := e.spy.Snapshot()
		_, err := e.a.Workspace("w", 100000)
		requireRefused(t, err, alloc.StateExternal, alloc.ErrCaptureIncompatibleAllocation)
		assertNoDriverCall(t, e.spy, before)
		same, err := e.a.Workspace("w", 1000)
		require.NoError(t, err, "the reserved workspace is still there")
		assert.Equal(t, w.Ptr(), same.Ptr())
	})
	require.NoError(t, e.a.ReleaseWorkspace("w"))
}

func (s *suite) workspaceReleaseRefusedInCaptureKeepsIt(t *testing.T) {
	e := s.env(t)
	w, err := e.a.Workspace("w", 1000)
	require.NoError(t, err)
	e.inExternalCapture(alloc.Global, func() {
		requireRefused(t, e.a.ReleaseWorkspace("w"), alloc.StateExternal, alloc.ErrCaptureIncompatibleAllocation)
	})
	same, err := e.a.Workspace("w", 1)
	require.NoError(t, err)
	assert.Equal(t, w.Ptr(), same.Ptr(), "a refused release keeps the workspace registered")
	require.NoError(t, e.a.ReleaseWorkspace("w"))
}
