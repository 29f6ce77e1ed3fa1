package alloc_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// abortable is a cpu driver whose StreamSynchronize hangs until Abort, as a
// plugin host's call hangs until it kills the backend process. It embeds
// the interface, not *cpu.Driver, so it is no StreamIdler or StreamPoller
// (a plugin host is neither): Synchronize makes the watched blocking call.
type abortable struct {
	driver.Driver
	hang    atomic.Bool
	killed  chan struct{} // closed by Abort: the stuck call returns
	aborted chan error    // Abort's cause, for the test
}

var errKilled = errors.New("backend killed")

func (d *abortable) StreamSynchronize(s driver.Stream) error {
	if d.hang.Load() {
		<-d.killed
		return errKilled
	}
	return d.Driver.StreamSynchronize(s)
}

func (d *abortable) Abort(cause error) {
	d.aborted <- cause
	close(d.killed)
}

func TestWatchdogAbortsAnAborterDriver(t *testing.T) {
	inner := newCPU(t, 1<<20)
	d := &abortable{Driver: inner, killed: make(chan struct{}), aborted: make(chan error, 1)}
	a, err := alloc.New(d, alloc.Options{Watchdog: 50 * time.Millisecond})
	require.NoError(t, err)

	require.NoError(t, a.Synchronize(), "no abort while calls return in time")
	select {
	case <-d.aborted:
		t.Fatal("Abort called without an expiry")
	default:
	}

	// Work is queued (as a kernel that never finishes would be), so the
	// stream is not idle and Synchronize makes the watched blocking call.
	buf, err := a.Alloc(256)
	require.NoError(t, err)
	require.NoError(t, a.Memset(buf, 0, 1, 256))
	d.hang.Store(true)
	err = a.Synchronize()
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	cause := <-d.aborted
	require.ErrorIs(t, cause, alloc.ErrCaptureTimeout, "Abort gets the watchdog's error")
	require.Contains(t, cause.Error(), "Synchronize")
	d.hang.Store(false)
	require.Eventually(t, func() bool { return a.Synchronize() == nil }, 5*time.Second, 5*time.Millisecond,
		"the aborted call returned, so the allocator is usable again")
	require.EqualValues(t, 1, a.Stats().Timeouts)
	require.NoError(t, a.Free(buf))
	require.NoError(t, a.Close())
}

func TestBackendSentinelsAreDistinct(t *testing.T) {
	require.NotErrorIs(t, driver.ErrBackendCrashed, driver.ErrBackendHung)
	require.NotErrorIs(t, driver.ErrBackendHung, driver.ErrBackendCrashed)
	require.NotErrorIs(t, driver.ErrBackendCrashed, driver.ErrBackendUnavailable)
}
