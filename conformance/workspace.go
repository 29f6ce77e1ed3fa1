package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Workspaces are the fix for the lazy-cudaMalloc-on-first-use hang: reserve
// before capturing and the capture allocates nothing.
func (s *suite) workspace(t *testing.T) {
	names := []string{"attn", "gemm", "reduce"}
	t.Run("reserved_costs_nothing_in_capture", func(t *testing.T) {
		for _, mode := range driver.Modes() {
			t.Run(mode.String(), func(t *testing.T) {
				e := s.env(t)
				for i, n := range names {
					_, err := e.a.Workspace(n, int64(1000*(i+1)))
					require.NoError(t, err)
				}
				before := e.spy.Snapshot()
				g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
					var errs []error
					for i, n := range names {
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
				assertCalls(t, e.spy, before, alloctest.MethodMallocAsync, 0)
				assertCalls(t, e.spy, before, alloctest.MethodMalloc, 0)
				launch(t, e.a, g)
				for i, n := range names {
					w, err := e.a.Workspace(n, 1)
					require.NoError(t, err)
					require.Equal(t, repeat(byte(i), int(w.Size())), download(t, e.a, w, 0, w.Size()))
				}
				require.NoError(t, g.Close())
				for _, n := range names {
					require.NoError(t, e.a.ReleaseWorkspace(n))
				}
			})
		}
	})
	t.Run("lazy_lives_with_graph", func(t *testing.T) {
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
	})
	t.Run("grow_replaces", func(t *testing.T) {
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
	})
	t.Run("grow_refused_outside_own_capture", func(t *testing.T) {
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
	})
	t.Run("release_refused_in_capture_keeps_it", func(t *testing.T) {
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
	})
}
