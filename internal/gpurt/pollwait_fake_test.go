package gpurt_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// With the watchdog on, the allocator's Synchronize over either driver
// first polls the stream query on the caller's goroutine; a stream still
// busy (the query answers not ready) after the quick polls is waited for
// by the watched blocking synchronize, which returns the moment the
// stream is done (issue 23, item 1: docs/allocator-core.md, "Waits
// without a hand-off"). An idle stream costs one query and no blocking
// call.
func TestFakeWatchedSynchronizePollsTheQuery(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		a, err := alloc.New(d, alloc.Options{Watchdog: time.Minute})
		require.NoError(t, err)
		defer a.Close()
		log.Lines()

		v.fail(t, v.fn("StreamQuery")+":600") // not ready, until cleared
		require.NoError(t, a.Synchronize())
		lines := log.Lines()
		require.Greater(t, len(find(lines, v.fn("StreamQuery"))), 1, "polled first: %v", lines)
		require.Len(t, find(lines, v.fn("StreamSynchronize")), 1, "then one blocking call: %v", lines)

		v.fail(t, "")
		require.NoError(t, a.Synchronize())
		lines = log.Lines()
		require.Len(t, find(lines, v.fn("StreamQuery")), 1, "idle: one query: %v", lines)
		require.Empty(t, find(lines, v.fn("StreamSynchronize")), "idle: no blocking call: %v", lines)
	})
}
