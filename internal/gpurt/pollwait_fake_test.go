package gpurt_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// With the watchdog on, the allocator's Synchronize over either driver
// waits for a busy stream (the query answers not ready) by polling the
// stream query on the caller's goroutine, never by the blocking
// synchronize, and gives ErrCaptureTimeout at the deadline; once the
// stream answers ready, it succeeds (issue 23, item 1).
func TestFakeWatchedSynchronizePollsTheQuery(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		const deadline = 50 * time.Millisecond
		a, err := alloc.New(d, alloc.Options{Watchdog: deadline})
		require.NoError(t, err)
		defer a.Close()
		log.Lines()

		v.fail(t, v.fn("StreamQuery")+":600") // not ready, until cleared
		start := time.Now()
		err = a.Synchronize()
		require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
		require.GreaterOrEqual(t, time.Since(start), deadline)
		require.EqualValues(t, 1, a.Stats().Timeouts)
		lines := log.Lines()
		require.Greater(t, len(find(lines, v.fn("StreamQuery"))), 1, "polled: %v", lines)
		require.Empty(t, find(lines, v.fn("StreamSynchronize")), "no blocking call: %v", lines)

		v.fail(t, "")
		require.NoError(t, a.Synchronize(), "ready: nothing stuck, no refusal")
		require.Empty(t, find(log.Lines(), v.fn("StreamSynchronize")))
	})
}
