package conformance

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// errNoCapture is what a driver without graph support returns from
// BeginCapture; the spy plays that driver.
var errNoCapture = fmt.Errorf("%w: conformance spy: this driver cannot capture", driver.ErrCaptureUnavailable)

// withCapture: WithCapture returns a graph when its function succeeds,
// ends the capture on every failure, and runs the function eagerly only
// when asked to and the driver cannot capture.
func (s *suite) withCapture(t *testing.T) {
	runRules(t,
		rule{"graph_on_success", inEachMode(s.withCaptureGraphOnSuccess)},
		rule{"panic_ends_capture_and_repanics", s.withCapturePanicEndsCaptureAndRepanics},
		rule{"begin_unavailable", s.beginCaptureUnavailableRefused},
		rule{"no_fallback_without_option", s.withCaptureNoFallbackWithoutOption},
		rule{"eager_fallback", s.withCaptureEagerFallbackRunsFnAtEveryLaunch},
		rule{"eager_fallback_fn_error", s.withCaptureEagerFallbackFnError},
		rule{"eager_fallback_owns_its_allocations", s.withCaptureEagerFallbackOwnsItsAllocations},
		rule{"fn_error_counts_as_failed_capture", s.withCaptureFnErrorCountsAsFailedCapture},
		rule{"other_goroutines_are_recorded", s.withCaptureRecordsOtherGoroutines},
		rule{"fallback_unused_when_capture_works", s.withCaptureFallbackUnusedWhenCaptureWorks},
	)
}

// withCaptureGraphOnSuccess: the function runs while capturing; the graph
// it returns is a real one, with nothing allocated and nothing to warn
// of, and its launch does the function's work.
func (s *suite) withCaptureGraphOnSuccess(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 4096)
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
		// fn runs on another goroutine: assert, never require.
		st, err := e.a.CaptureStatus()
		assert.NoError(t, err)
		assert.Equal(t, alloc.StateActive.String(), st.String())
		return e.a.Memset(b, 0, 9, 4096)
	})
	require.NoError(t, err)
	require.NotNil(t, g)
	assert.False(t, g.Eager())
	assert.Zero(t, g.CaptureAllocCount())
	assert.Empty(t, g.Warnings())
	requireState(t, e.a, alloc.StateNone)
	launch(t, e.a, g)
	require.Equal(t, repeat(9, 4096), download(t, e.a, b, 0, 4096))
	require.NoError(t, g.Close())
	require.NoError(t, e.a.Free(b))
}

func (s *suite) withCapturePanicEndsCaptureAndRepanics(t *testing.T) {
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
}

func (s *suite) beginCaptureUnavailableRefused(t *testing.T) {
	e := s.env(t)
	e.spy.FailBeginCapture(errNoCapture)
	requireRefused(t, e.a.BeginCapture(alloc.Global), alloc.StateNone, driver.ErrCaptureUnavailable)
	requireState(t, e.a, alloc.StateNone)
	_, err := e.a.EndCapture()
	require.ErrorIs(t, err, alloc.ErrNotCapturing)
}

func (s *suite) withCaptureNoFallbackWithoutOption(t *testing.T) {
	e := s.env(t)
	e.spy.FailBeginCapture(errNoCapture)
	calls := 0
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { calls++; return nil })
	require.ErrorIs(t, err, driver.ErrCaptureUnavailable)
	require.Nil(t, g)
	assert.Zero(t, calls, "fn must not run when capture fails and no fallback was asked for")
}

// withCaptureEagerFallbackRunsFnAtEveryLaunch: on a driver that cannot
// capture, EagerFallback runs fn once at once and again at every Launch
// of the eager graph, which says so, until it is closed.
func (s *suite) withCaptureEagerFallbackRunsFnAtEveryLaunch(t *testing.T) {
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
}

func (s *suite) withCaptureEagerFallbackFnError(t *testing.T) {
	e := s.env(t)
	e.spy.FailBeginCapture(errNoCapture)
	g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error { return errBoom })
	require.ErrorIs(t, err, errBoom)
	require.Nil(t, g)
	assert.Zero(t, e.a.Stats().LiveGraphs)
}

// withCaptureEagerFallbackOwnsItsAllocations: as a captured graph owns
// what its capture allocated, an eager graph owns what its function
// allocates: those it does not free are freed at the next Launch
// (auto-free-on-launch) and at Close, so launching in a loop does not
// grow memory.
func (s *suite) withCaptureEagerFallbackOwnsItsAllocations(t *testing.T) {
	e := s.env(t)
	e.spy.FailBeginCapture(errNoCapture)
	base := usageOf(e.a)
	var last alloc.Buffer
	g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error {
		var err error
		if last, err = e.a.Alloc(65536); err != nil {
			return err
		}
		if _, err = e.a.Alloc(1000); err != nil {
			return err
		}
		return e.a.Memset(last, 0, 7, 65536)
	})
	require.NoError(t, err)
	for range 50 {
		launch(t, e.a, g)
		// Valid after the launch, as a graph allocation is.
		require.Equal(t, repeat(7, 16), download(t, e.a, last, 0, 16))
	}
	assert.Equal(t, base.Live+2, usageOf(e.a).Live, "only the last launch's allocations are alive")
	require.NoError(t, g.Close())
	assert.Equal(t, base.Live, usageOf(e.a).Live, "Close frees the eager graph's allocations")
	assert.Equal(t, base.InUse, usageOf(e.a).InUse)
}

func (s *suite) withCaptureFnErrorCountsAsFailedCapture(t *testing.T) {
	e := s.env(t)
	before := e.a.Stats()
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return errBoom })
	require.ErrorIs(t, err, errBoom)
	require.Nil(t, g)
	after := e.a.Stats()
	assert.Equal(t, before.Captures, after.Captures, "a capture that returned no graph is not a capture")
	assert.Equal(t, before.FailedCapture+1, after.FailedCapture)
}

// withCaptureRecordsOtherGoroutines: the allocator is one stream: as with
// a CUDA stream, work that any goroutine enqueues on it while it captures
// is captured (and an allocation is the graph's). Documented in the
// README.
func (s *suite) withCaptureRecordsOtherGoroutines(t *testing.T) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 4096)
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	done := make(chan error, 1)
	var x alloc.Buffer
	go func() {
		var err error
		if x, err = e.a.Alloc(4096); err == nil {
			err = e.a.Memset(b, 0, 9, 4096)
		}
		done <- err
	}()
	require.NoError(t, <-done)
	assert.Equal(t, 1, e.a.CaptureAllocCount(), "the other goroutine's allocation is in the capture")
	g, err := e.a.EndCapture()
	require.NoError(t, err)
	require.ErrorIs(t, e.a.Free(x), alloc.ErrInvalidBuffer, "the graph owns it")
	upload(t, e.a, b, 0, repeat(0, 4096))
	launch(t, e.a, g)
	require.Equal(t, repeat(9, 4096), download(t, e.a, b, 0, 4096), "the other goroutine's memset replays")
	require.NoError(t, g.Close())
	require.NoError(t, e.a.Free(b))
}

func (s *suite) withCaptureFallbackUnusedWhenCaptureWorks(t *testing.T) {
	e := s.env(t)
	g, err := e.a.WithCapture(alloc.CaptureOptions{EagerFallback: true}, func() error { return nil })
	require.NoError(t, err)
	assert.False(t, g.Eager())
	require.NoError(t, g.Close())
}
