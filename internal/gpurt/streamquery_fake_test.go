package gpurt_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// StreamIdle is the stream query: success is idle (and reports, once, the
// failure of a host function already run, as a synchronize would), the
// not-ready code is "not idle" with no error, any other code is its typed
// error. It checks the handle first, like every stream call.
func TestFakeStreamIdle(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		s := newStream(t, d)
		log.Lines()
		idle, err := d.StreamIdle(s)
		require.NoError(t, err)
		require.True(t, idle)
		require.Len(t, find(log.Lines(), v.fn("StreamQuery")), 1, "one stream query, nothing else")

		v.fail(t, v.fn("StreamQuery")+":600")
		idle, err = d.StreamIdle(s)
		require.NoError(t, err, "not ready is no error")
		require.False(t, idle)
		v.fail(t, v.fn("StreamQuery")+":2")
		_, err = d.StreamIdle(s)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
		require.Contains(t, err.Error(), v.failed(v.fn("StreamQuery"), 2))
		v.fail(t, "")

		boom := errors.New("boom")
		require.NoError(t, d.LaunchHostFunc(s, func() error { return boom }))
		idle, err = d.StreamIdle(s)
		require.True(t, idle)
		require.ErrorIs(t, err, boom, "the host function's failure, as synchronize reports it")
		idle, err = d.StreamIdle(s)
		require.True(t, idle)
		require.NoError(t, err, "reported once")

		_, err = d.StreamIdle(s + 1)
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
		require.NoError(t, d.DestroyStream(s))
		_, err = d.StreamIdle(s)
		require.ErrorIs(t, err, alloc.ErrInvalidValue, "a destroyed stream")
		require.NoError(t, d.Close())
		_, err = d.StreamIdle(s)
		require.ErrorIs(t, err, alloc.ErrClosed)
	})
}

// The allocator's Synchronize over either driver asks StreamIdle first:
// an idle stream costs one stream query and no synchronize.
func TestFakeSynchronizeOfIdleStreamIsOneQuery(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, log := openFake(t, v, opts{})
		a := alloctest.New(t, d, alloc.Options{})
		log.Lines()
		require.NoError(t, a.Synchronize())
		lines := log.Lines()
		require.Len(t, find(lines, v.fn("StreamQuery")), 1, "%v", lines)
		require.Empty(t, find(lines, v.fn("StreamSynchronize")), "%v", lines)
	})
}

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
