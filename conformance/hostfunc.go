package conformance

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// hostFunc: Allocator.LaunchHostFunc puts the engine's own host work in
// stream order, and a capture records it so every replay runs it. A backend
// that cannot (a plugin: a Go function cannot cross into its process) must
// say so with errors.ErrUnsupported, never drop the function.
func (s *suite) hostFunc(t *testing.T) {
	supported := func(t *testing.T, e *env) bool {
		_, ok := e.drv.(driver.HostFuncLauncher)
		if !ok {
			err := e.a.LaunchHostFunc(func() error { return nil })
			require.ErrorIs(t, err, errors.ErrUnsupported, "a backend without host functions must say so")
			require.NoError(t, e.a.Synchronize())
		}
		return ok
	}
	t.Run("stream_order", func(t *testing.T) {
		e := s.env(t)
		if !supported(t, e) {
			return
		}
		var order []int
		for i := range 3 {
			require.NoError(t, e.a.LaunchHostFunc(func() error { order = append(order, i); return nil }))
		}
		require.NoError(t, e.a.Synchronize())
		require.Equal(t, []int{0, 1, 2}, order, "host functions run in stream order, all done by Synchronize")
	})
	t.Run("captured_runs_at_every_replay", func(t *testing.T) {
		e := s.env(t)
		if !supported(t, e) {
			return
		}
		var runs, input, seen atomic.Int64
		g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
			return e.a.LaunchHostFunc(func() error {
				runs.Add(1)
				seen.Store(input.Load()) // reads its input at run time, not at capture
				return nil
			})
		})
		require.NoError(t, err)
		require.Zero(t, runs.Load(), "a captured host function does not run at capture")
		for i := int64(1); i <= 3; i++ {
			input.Store(10 * i)
			launch(t, e.a, g)
			require.Equal(t, i, runs.Load())
			require.Equal(t, 10*i, seen.Load(), "replay %d ran with stale input", i)
		}
		require.NoError(t, g.Close())
	})
	t.Run("error_fails_the_stream", func(t *testing.T) {
		e := s.env(t)
		if !supported(t, e) {
			return
		}
		require.NoError(t, e.a.LaunchHostFunc(func() error { return errBoom }))
		require.ErrorIs(t, e.a.Synchronize(), errBoom, "the next synchronize reports the host function's failure")
		require.NoError(t, e.a.Synchronize(), "reported once")
	})
	t.Run("refused_in_external_capture", func(t *testing.T) {
		e := s.env(t)
		if !supported(t, e) {
			return
		}
		ran := false
		e.inExternalCapture(alloc.Global, func() {
			before := e.spy.Snapshot()
			err := e.a.LaunchHostFunc(func() error { ran = true; return nil })
			requireRefused(t, err, alloc.StateExternal, alloc.ErrCaptureIncompatibleAllocation)
			assertCalls(t, e.spy, before, alloctest.MethodLaunchHostFunc, 0)
		})
		require.NoError(t, e.a.Synchronize())
		assert.False(t, ran)
	})
	t.Run("ordered_with_copies", s.hostFuncOrderedWithCopies)
	t.Run("nil_function", func(t *testing.T) {
		e := s.env(t)
		require.ErrorIs(t, e.a.LaunchHostFunc(nil), alloc.ErrInvalidValue)
	})
}

// enqueue: Allocator.Enqueue, an engine's own stream work through the
// guard, with the buffers it uses held by the graph that records it.
func (s *suite) enqueue(t *testing.T) {
	t.Run("recorded_and_held", func(t *testing.T) {
		e := s.env(t)
		b := mustAlloc(t, e.a, 4096)
		calls := 0
		g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
			return e.a.Enqueue("kernel", []alloc.Buffer{b}, func(st driver.Stream) error {
				calls++
				require.Equal(t, e.a.Stream(), st)
				return e.spy.Inner().MemsetAsync(b.Ptr(), 5, 4096, st)
			})
		})
		require.NoError(t, err)
		require.Equal(t, 1, calls, "called once, at capture")
		require.NoError(t, e.a.Free(b))
		next := mustAlloc(t, e.a, 4096)
		assert.False(t, overlaps(next.Ptr(), 4096, b.Ptr(), 4096), "a buffer the recorded work uses is held until the graph closes")
		launch(t, e.a, g)
		require.NoError(t, g.Close())
		require.NoError(t, e.a.Free(next))
	})
	t.Run("refused_in_external_capture", func(t *testing.T) {
		e := s.env(t)
		e.inExternalCapture(alloc.Global, func() {
			err := e.a.Enqueue("kernel", nil, func(driver.Stream) error { t.Error("called during a capture the allocator did not start"); return nil })
			requireRefused(t, err, alloc.StateExternal, alloc.ErrCaptureIncompatibleAllocation)
		})
	})
	t.Run("bad_buffer", func(t *testing.T) {
		e := s.env(t)
		b := mustAlloc(t, e.a, 64)
		require.NoError(t, e.a.Free(b))
		require.ErrorIs(t, e.a.Enqueue("kernel", []alloc.Buffer{b}, func(driver.Stream) error { return nil }), alloc.ErrInvalidBuffer)
		require.ErrorIs(t, e.a.Enqueue("kernel", nil, nil), alloc.ErrInvalidValue)
	})
}
