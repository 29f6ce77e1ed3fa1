package alloc_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// syncCounter counts the blocking calls Synchronize and Query make.
type syncCounter struct {
	*cpu.Driver
	syncs, queries atomic.Int32
}

func (d *syncCounter) StreamSynchronize(s driver.Stream) error {
	d.syncs.Add(1)
	return d.Driver.StreamSynchronize(s)
}

func (d *syncCounter) StreamQuery(s driver.Stream) (bool, error) {
	d.queries.Add(1)
	return d.Driver.StreamQuery(s)
}

// On a StreamIdler, an idle stream is synchronized and queried inline with
// no blocking call; with the watchdog off, queued work still goes through
// the blocking call; with it on, a StreamPoller's poll runs the work on the
// caller's goroutine and no blocking call is made at all (issue 23). A
// failure of the work is reported either way, once.
func TestSynchronizeIdleStreamInline(t *testing.T) {
	for _, c := range []struct {
		name     string
		watchdog time.Duration
		syncs    int32 // blocking calls that synchronizing queued work makes
	}{{"watchdog=off", -1, 1}, {"watchdog=on", time.Minute, 0}} {
		t.Run(c.name, func(t *testing.T) {
			inner := newCPU(t, 1<<20)
			d := &syncCounter{Driver: inner}
			a, err := alloc.New(d, alloc.Options{Watchdog: c.watchdog})
			require.NoError(t, err)
			defer a.Close()

			require.NoError(t, a.Synchronize())
			done, err := a.Query()
			require.NoError(t, err)
			require.True(t, done)
			require.Zero(t, d.syncs.Load()+d.queries.Load(), "idle: no blocking call")

			buf, err := a.Alloc(256)
			require.NoError(t, err)
			require.NoError(t, a.Memset(buf, 0, 1, 256))
			require.NoError(t, a.Synchronize())
			require.Equal(t, c.syncs, d.syncs.Load(), "work queued")
			got := make([]byte, 256)
			require.NoError(t, a.Download(got, buf, 0))
			require.Equal(t, bytes.Repeat([]byte{1}, 256), got, "the memset ran")

			boom := errors.New("host function failed")
			require.NoError(t, a.LaunchHostFunc(func() error { return boom }))
			require.ErrorIs(t, a.Synchronize(), boom)
			require.NoError(t, a.Synchronize(), "reported once")
			require.Zero(t, d.queries.Load(), "Synchronize never makes the blocking query")
			require.NoError(t, a.Free(buf))
		})
	}
}
