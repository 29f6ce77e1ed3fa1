package conformance

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// watchdogBusyStream: a Synchronize on a stream whose work does not end
// (a host function that blocks) costs the caller the deadline, whichever
// way the allocator waits: on the backend's own driver, not the suite's
// spy, so a driver that can be polled (driver.StreamIdler, StreamPoller) is
// waited for by polling on the caller's goroutine. Once the work
// ends, the stream synchronizes again.
func (s *suite) watchdogBusyStream(t *testing.T) {
	d := s.openDriver(t)
	if _, ok := d.(driver.HostFuncLauncher); !ok {
		t.Skip("the backend cannot launch host functions, which this test keeps its stream busy with")
	}
	a, err := alloc.New(d, alloc.Options{Watchdog: wdDeadline})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()

	var ranAtLaunch atomic.Bool
	require.NoError(t, a.LaunchHostFunc(func() error { ranAtLaunch.Store(true); return nil }))
	if ranAtLaunch.Load() {
		t.Skip("the backend runs a host function inside its launch (a synchronous stream): its stream is never busy for a Synchronize")
	}
	require.NoError(t, a.Synchronize())

	unblock := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(unblock) }) }
	defer release()
	require.NoError(t, a.LaunchHostFunc(func() error { <-unblock; return nil }))
	start := time.Now()
	err = within(t, wdSlack, "Synchronize on a busy stream", a.Synchronize)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	assert.GreaterOrEqual(t, elapsed, wdDeadline, "returned before the deadline")
	assert.Less(t, elapsed, wdSlack, "the caller must get control back at the deadline")
	assert.EqualValues(t, 1, a.Stats().Timeouts)

	release()
	eventually(t, "Synchronize works again once the work ended", func() bool { return a.Synchronize() == nil })
}
