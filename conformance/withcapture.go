package conformance

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// errNoCapture is what a driver without graph support returns from
// BeginCapture; the spy plays that driver.
var errNoCapture = fmt.Errorf("%w: conformance spy: this driver cannot capture", alloc.ErrCaptureUnavailable)

func (s *suite) withCapture(t *testing.T) {
	t.Run("graph_on_success", func(t *testing.T) {
		for _, mode := range alloc.Modes {
			t.Run(mode.String(), func(t *testing.T) {
				e := s.env(t)
				b := mustAlloc(t, e.a, 4096)
				g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
					// fn runs on another goroutine: assert, never require.
					st, err := e.a.CaptureStatus()
					assert.NoError(t, err)
					assert.Equal(t, alloc.StateActive.String(), st.String())
					return e.a.Memset(b, 0, 4096, 9)
				})
				require.NoError(t, err)
				require.NotNil(t, g)
				assert.False(t, g.Eager())
				assert.Zero(t, g.CaptureAllocs())
				assert.Empty(t, g.Warnings())
				requireState(t, e.a, alloc.StateNone)
				launch(t, e.a, g)
				require.Equal(t, repeat(9, 4096), download(t, e.a, b, 0, 4096))
				require.NoError(t, g.Close())
				require.NoError(t, e.a.Free(b))
			})
		}
	})
	t.Run("panic_ends_capture_and_repanics", func(t *testing.T) {
		e := s.env(t)
		h := mustHost(t, e.a, 4096)
		base := usageOf(e.a)
		assert.PanicsWithValue(t, "conformance: boom", func() {
			_, _ = e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
				if err := allocSome(e.a, h); err != nil {
					return err
				}
				panic("conformance: boom")
			})
		})
		requireState(t, e.a, alloc.StateNone)
		assert.Equal(t, base, usageOf(e.a), "a panicking capture released everything")
		require.NoError(t, e.a.Synchronize(), "the capture is over: sync is legal again")
		g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
		require.NoError(t, err)
		require.NoError(t, g.Close())
		require.NoError(t, h.Close())
	})
	t.Run("begin_unavailable", func(t *testing.T) {
		e := s.env(t)
		e.spy.FailBeginCapture(errNoCapture)
		requireRefused(t, e.a.BeginCapture(alloc.Global), alloc.StateNone, alloc.ErrCaptureUnavailable)
		requireState(t, e.a, alloc.StateNone)
		_, err := e.a.EndCapture()
		require.ErrorIs(t, err, alloc.ErrNotCapturing)
	})
	t.Run("no_fallback_without_option", func(t *testing.T) {
		e := s.env(t)
		e.spy.FailBeginCapture(errNoCapture)
		calls := 0
		g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { calls++; return nil })
		require.ErrorIs(t, err, alloc.ErrCaptureUnavailable)
		require.Nil(t, g)
		assert.Zero(t, calls, "fn must not run when capture fails and no fallback was asked for")
	})
	t.Run("eager_fallback", func(t *testing.T) {
		e := s.env(t)
		e.spy.FailBeginCapture(errNoCapture)
		b := mustAlloc(t, e.a, 1000)
		calls := 0
		g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error {
			calls++
			// Pageable copies are fine: nothing is capturing.
			return e.a.Upload(b, 0, repeat(byte(calls), 1000))
		})
		require.NoError(t, err)
		require.NotNil(t, g)
		assert.True(t, g.Eager())
		assert.NotEmpty(t, g.Warnings(), "an eager graph says so")
		assert.Equal(t, 1, calls, "fn ran once, eagerly")
		require.Equal(t, repeat(1, 1000), download(t, e.a, b, 0, 1000))
		launch(t, e.a, g)
		assert.Equal(t, 2, calls, "Launch runs fn again")
		require.Equal(t, repeat(2, 1000), download(t, e.a, b, 0, 1000))
		require.NoError(t, g.Close())
		require.ErrorIs(t, g.Launch(), alloc.ErrClosed)
		assert.Equal(t, 2, calls)
		require.NoError(t, e.a.Free(b))
	})
	t.Run("eager_fallback_fn_error", func(t *testing.T) {
		e := s.env(t)
		e.spy.FailBeginCapture(errNoCapture)
		g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error { return errBoom })
		require.ErrorIs(t, err, errBoom)
		require.Nil(t, g)
		assert.Zero(t, e.a.Stats().LiveGraphs)
	})
	t.Run("fallback_unused_when_capture_works", func(t *testing.T) {
		e := s.env(t)
		g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error { return nil })
		require.NoError(t, err)
		assert.False(t, g.Eager())
		require.NoError(t, g.Close())
	})
}
