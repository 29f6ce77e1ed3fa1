package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

var errBoom = errors.New("conformance: the captured function failed")

// allocSome allocates inside a capture and uses the memory, so a failed
// capture has something to release.
func allocSome(a *alloc.Allocator, h *alloc.HostBuffer) error {
	var bs []alloc.Buffer
	for _, n := range []int64{100, 4096, 1 << 20} {
		b, err := a.Alloc(n)
		if err != nil {
			return err
		}
		bs = append(bs, b)
	}
	if err := a.UploadHost(bs[1], 0, h, 0, 4096); err != nil {
		return err
	}
	return a.Free(bs[0]) // one freed inside, the others not
}

// A failed capture releases everything it took and leaves the allocator
// ready for the next one.
func (s *suite) failedCapture(t *testing.T) {
	inEachMode(func(t *testing.T, mode alloc.CaptureMode) {
		runRules(t,
			rule{"fn_error", func(t *testing.T) { s.fnErrorReleasesEverything(t, mode) }},
			rule{"fn_error_wins_over_end_error", func(t *testing.T) { s.fnErrorWinsOverEndError(t, mode) }},
			rule{"invalidated", func(t *testing.T) { s.invalidatedCaptureReleasesEverything(t, mode) }},
		)
	})(t)
	t.Run("deferred_sync_free_made", s.deferredSyncFreeMadeAtFailedEnd)
}

// expectClean checks the allocator is back to base with no capture, one
// more failed capture counted, and the next capture works.
func expectClean(t *testing.T, e *env, base usage, failedBefore uint64) {
	t.Helper()
	requireState(t, e.a, alloc.StateNone)
	assert.Equal(t, base, usageOf(e.a), "a failed capture released everything")
	assert.Equal(t, failedBefore+1, e.a.Stats().FailedCapture)
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
	require.NoError(t, err, "the next capture works")
	require.NoError(t, g.Close())
}

func (s *suite) fnErrorReleasesEverything(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	h := mustHost(t, e.a, 4096)
	base := usageOf(e.a)
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
		if err := allocSome(e.a, h); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	require.Nil(t, g)
	requireState(t, e.a, alloc.StateNone)
	assert.Equal(t, base, usageOf(e.a), "a failed capture released everything")
	require.NoError(t, h.Close())
}

func (s *suite) fnErrorWinsOverEndError(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	h := mustHost(t, e.a, 4096)
	base, failed := usageOf(e.a), e.a.Stats().FailedCapture
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
		if err := allocSome(e.a, h); err != nil {
			return err
		}
		// EndCapture will fail too. fn runs on another goroutine,
		// so no require here.
		if err := invalidateCapture(e.spy, e.a); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom, "fn's error wins over EndCapture's")
	require.Nil(t, g)
	expectClean(t, e, base, failed)
	require.NoError(t, h.Close())
}

// invalidatedCaptureReleasesEverything: a capture the driver invalidated
// ends with ErrCaptureInvalidated, releases what it allocated and makes
// the frees it deferred.
func (s *suite) invalidatedCaptureReleasesEverything(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	h := mustHost(t, e.a, 4096)
	pre := mustAlloc(t, e.a, 4096)
	base, failed := usageOf(e.a), e.a.Stats().FailedCapture
	require.NoError(t, e.a.BeginCapture(mode))
	require.NoError(t, allocSome(e.a, h))
	require.NoError(t, e.a.Free(pre)) // deferred by the capture
	invalidate(t, e, e.a)
	requireState(t, e.a, alloc.StateInvalidated)
	g, err := e.a.EndCapture()
	requireRefused(t, err, alloc.StateInvalidated, alloc.ErrCaptureInvalidated)
	require.Nil(t, g)
	// pre's free took effect when the capture ended.
	base.Live--
	base.InUse -= pre.Size()
	expectClean(t, e, base, failed)
	assertReused(t, e, pre.Ptr(), 4096, "the deferred free went back to the pool")
	require.NoError(t, h.Close())
}

// deferredSyncFreeMadeAtFailedEnd: an AllocSync buffer freed during a
// capture that then fails is really freed (a synchronous driver free)
// once the capture ends.
func (s *suite) deferredSyncFreeMadeAtFailedEnd(t *testing.T) {
	e := s.env(t)
	b, err := e.a.AllocSync(4096)
	require.NoError(t, err)
	base, failed := usageOf(e.a), e.a.Stats().FailedCapture
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	before := e.spy.Snapshot()
	require.NoError(t, e.a.Free(b))
	assertCalls(t, e.spy, before, alloctest.MethodFree, 0)
	invalidate(t, e, e.a)
	_, err = e.a.EndCapture()
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	assertCalls(t, e.spy, before, alloctest.MethodFree, 1)
	base.Live--
	base.InUse -= 4096
	base.Reserved -= 4096
	expectClean(t, e, base, failed)
}
