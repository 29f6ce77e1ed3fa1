package alloc_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// pollDeadline is the watchdog of these tests; pollSlack bounds how late
// the caller may get control back (generous: a loaded 2-core machine under
// -race).
const (
	pollDeadline = 100 * time.Millisecond
	pollSlack    = 3 * time.Second
)

// countingPoller is a cpu driver (a StreamPoller) that counts its polls
// and the blocking calls Synchronize could make instead of polling, and
// can make its polls hang, as a driver query that breaks its promise
// would: the first poll then answers "busy" and the next ones hang.
type countingPoller struct {
	*cpu.Driver
	syncs    atomic.Int32
	polls    atomic.Int32
	hang     atomic.Pointer[chan struct{}] // non-nil: StreamPoll blocks until it is closed
	answered atomic.Bool                   // the first poll of a hang said "busy"
	inPoll   atomic.Int32                  // polls under way in a hang
	polling  chan struct{}                 // receives once a poll hangs
}

func newCountingPoller(t *testing.T) *countingPoller {
	inner := newCPU(t, 1<<20)
	return &countingPoller{Driver: inner, polling: make(chan struct{}, 16)}
}

func (d *countingPoller) StreamSynchronize(s driver.Stream) error {
	d.syncs.Add(1)
	return d.Driver.StreamSynchronize(s)
}

func (d *countingPoller) StreamPoll(s driver.Stream) (bool, error) {
	d.polls.Add(1)
	if h := d.hang.Load(); h != nil {
		if d.answered.CompareAndSwap(false, true) {
			return false, nil
		}
		d.inPoll.Add(1)
		d.polling <- struct{}{}
		<-*h
		d.inPoll.Add(-1)
	}
	return d.Driver.StreamPoll(s)
}

// hangPolls makes the next poll answer "busy" and those after it hang;
// the returned func releases them.
func (d *countingPoller) hangPolls() (release func()) {
	ch := make(chan struct{})
	d.answered.Store(false)
	d.hang.Store(&ch)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			d.hang.Store(nil)
			close(ch)
		}
	}
}

// newPolled makes an allocator with the tests' watchdog on d, closed by
// the test's cleanup.
func newPolled(t *testing.T, d driver.Driver) *alloc.Allocator {
	t.Helper()
	a, err := alloc.New(d, alloc.Options{Watchdog: pollDeadline})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	return a
}

// returnsWithin runs fn and fails the test if it has not returned after
// limit (a broken bound must fail, not hang, the test).
func returnsWithin(t *testing.T, limit time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("%s: still blocked after %v", what, limit)
		return nil
	}
}

// A watched Synchronize on a stream kept busy (a host function that does
// not return) polls briefly on its caller's goroutine, then hands the wait
// to the watched blocking call, which would return as soon as the stream is
// done; here it gives ErrCaptureTimeout at the deadline and the abandoned
// call counts as stuck until it returns, after which the allocator works
// again and the work queued behind the host function has run, in order.
func TestPolledSynchronizeHandsOffALongWait(t *testing.T) {
	d := newCountingPoller(t)
	a := newPolled(t, d)
	buf, err := a.Alloc(4096)
	require.NoError(t, err)

	unblock := make(chan struct{})
	ran := make(chan struct{})
	require.NoError(t, a.LaunchHostFunc(func() error { close(ran); <-unblock; return nil }))
	require.NoError(t, a.Memset(buf, 0, 7, 4096)) // queued behind the host function

	start := time.Now()
	err = returnsWithin(t, pollSlack, "Synchronize", a.Synchronize)
	took := time.Since(start)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	require.ErrorContains(t, err, "did not return within")
	assert.GreaterOrEqual(t, took, pollDeadline, "returned before the deadline")
	<-ran
	require.EqualValues(t, 1, a.Stats().Timeouts)
	require.EqualValues(t, 1, d.syncs.Load(), "the long wait went to the blocking call")

	close(unblock)
	require.Eventually(t, func() bool { return a.Synchronize() == nil }, pollSlack, time.Millisecond,
		"once the work ends and the abandoned call returns, the allocator works again")
	got := make([]byte, 4096)
	require.NoError(t, a.Download(got, buf, 0))
	require.Equal(t, byte(7), got[16], "the work queued behind the host function ran")
	require.EqualValues(t, 1, a.Stats().Timeouts)
	require.NoError(t, a.Free(buf))
}

// A poll that hangs in the driver (a query breaking its promise) while the
// wait goes on cannot be interrupted, but it is contained: at the deadline
// the monitor counts it stuck and other blocking calls fail at once instead
// of piling into the driver; when it returns, its caller gets
// ErrCaptureTimeout and the allocator works again.
func TestPolledSynchronizeHungPollIsContained(t *testing.T) {
	d := newCountingPoller(t)
	a := newPolled(t, d)
	buf, err := a.Alloc(4096)
	require.NoError(t, err)

	release := d.hangPolls()
	defer release()
	first := make(chan error, 1)
	go func() { first <- a.Synchronize() }()
	select {
	case <-d.polling:
	case <-time.After(pollSlack):
		t.Fatal("Synchronize did not poll")
	}
	require.Eventually(t, func() bool { return a.Stats().Timeouts == 1 }, pollSlack, time.Millisecond,
		"the monitor counts the hung poll at its deadline")

	start := time.Now()
	require.ErrorContains(t, returnsWithin(t, pollSlack, "Synchronize behind a hung poll", a.Synchronize), "not attempted")
	require.ErrorIs(t, returnsWithin(t, pollSlack, "Download behind a hung poll", func() error {
		return a.Download(make([]byte, 16), buf, 0)
	}), alloc.ErrCaptureTimeout)
	assert.Less(t, time.Since(start), pollDeadline, "calls behind a hung poll fail at once")
	require.EqualValues(t, 1, d.inPoll.Load(), "no second poll entered the hung driver")

	release()
	err = <-first
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout, "the hung caller gets the timeout when the call returns")
	require.ErrorContains(t, err, "did not return within")
	require.NoError(t, a.Synchronize(), "nothing is stuck any more")
	require.EqualValues(t, 1, a.Stats().Timeouts)
	require.Zero(t, d.syncs.Load())
	require.NoError(t, a.Free(buf))
}

// abortingPoller is a countingPoller that can be aborted: Abort releases a
// hung poll, as a plugin host's abort makes its stuck call return.
type abortingPoller struct {
	*countingPoller
	release func()
	aborted chan error
}

func (d *abortingPoller) Abort(cause error) {
	d.aborted <- cause
	d.release()
}

// A hung poll on a driver that is also an Aborter is aborted by the monitor
// at the deadline, so its caller gets control back then.
func TestPolledSynchronizeAbortsHungPoll(t *testing.T) {
	d := &abortingPoller{countingPoller: newCountingPoller(t), aborted: make(chan error, 1)}
	a := newPolled(t, d)
	d.release = d.hangPolls()
	defer d.release()

	err := returnsWithin(t, pollSlack, "Synchronize in a hung poll", a.Synchronize)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	cause := <-d.aborted
	require.ErrorIs(t, cause, alloc.ErrCaptureTimeout, "Abort gets the watchdog's error")
	require.ErrorContains(t, cause, "Synchronize")
	require.NoError(t, a.Synchronize())
	require.EqualValues(t, 1, a.Stats().Timeouts)
}

// The polled wait keeps Synchronize's capture rules: refused before any
// poll during a capture of the allocator's own and, in Global mode, of a
// sibling's; the captures stay valid.
func TestPolledSynchronizeRefusedInCapture(t *testing.T) {
	d := newCountingPoller(t)
	a, b := newPolled(t, d), newPolled(t, d)

	require.NoError(t, a.BeginCapture(alloc.Global))
	before := d.polls.Load()
	require.ErrorIs(t, a.Synchronize(), alloc.ErrSyncDuringCapture)
	require.ErrorIs(t, b.Synchronize(), alloc.ErrSyncDuringCapture)
	_, err := b.Query()
	require.ErrorIs(t, err, alloc.ErrSyncDuringCapture)
	require.Equal(t, before, d.polls.Load(), "refused before any poll")
	g, err := a.EndCapture()
	require.NoError(t, err, "the capture stayed valid")
	require.NoError(t, g.Close())
	require.NoError(t, b.Synchronize())
	require.Zero(t, a.Stats().Timeouts+b.Stats().Timeouts)
}
