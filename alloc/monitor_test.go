package alloc

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The one monitor must expire a short deadline on time even while a call
// with a much later deadline (the one it planned to wake for) is in flight.
func TestMonitorEarlierDeadlineWakesIt(t *testing.T) {
	long := &watchdog{timeout: time.Hour}
	release := make(chan struct{})
	longDone := make(chan error, 1)
	go func() {
		_, err := long.run("long", long.timeout, func() error { <-release; return nil }, nil)
		longDone <- err
	}()
	time.Sleep(10 * time.Millisecond) // the monitor now plans to wake in an hour

	short := &watchdog{timeout: 30 * time.Millisecond}
	hang := make(chan struct{})
	lateErr := make(chan error, 1)
	start := time.Now()
	expired, err := short.run("short", short.timeout, func() error { <-hang; return errors.New("finally") }, func(err error) { lateErr <- err })
	took := time.Since(start)
	require.True(t, expired)
	require.ErrorIs(t, err, ErrCaptureTimeout)
	require.Less(t, took, 10*time.Second, "expired at its own deadline, not the hour-long one")
	require.EqualValues(t, 1, short.stuck.Load(), "the abandoned call counts as stuck")
	require.EqualValues(t, 1, short.expired.Load())

	_, err = short.run("next", short.timeout, func() error { t.Error("must not run"); return nil }, nil)
	require.ErrorIs(t, err, ErrCaptureTimeout, "refused while one is stuck")
	require.ErrorContains(t, err, "not attempted")

	close(hang)
	require.EqualError(t, <-lateErr, "finally", "late gets the abandoned call's result")
	require.Eventually(t, func() bool { return short.stuck.Load() == 0 }, 5*time.Second, time.Millisecond)
	_, err = short.run("after", short.timeout, func() error { return nil }, nil)
	require.NoError(t, err, "calls run again once the stuck one returned")

	close(release)
	require.NoError(t, <-longDone)
	require.Zero(t, long.expired.Load())
}

// Many concurrent calls, some returning in time and some not, each get
// exactly one outcome: their own result or the timeout (and then late gets
// the result). Run with -race: watches are recycled between them.
func TestMonitorManyCalls(t *testing.T) {
	const n = 400
	var wg sync.WaitGroup
	var returned, expired, lates atomic.Int32
	ws := []*watchdog{{timeout: 20 * time.Millisecond}, {timeout: time.Minute}}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			w := ws[i%2]
			want := errors.New("result")
			slow := i%2 == 0 && i%8 == 0
			exp, err := w.run("op", w.timeout, func() error {
				if slow {
					time.Sleep(100 * time.Millisecond)
				}
				return want
			}, func(err error) {
				if err != want {
					t.Errorf("late got %v", err)
				}
				lates.Add(1)
			})
			switch {
			case exp:
				require.ErrorIs(t, err, ErrCaptureTimeout)
				expired.Add(1)
			case errors.Is(err, ErrCaptureTimeout):
				// refused: an earlier call on this watchdog was stuck
			default:
				require.Same(t, want, err)
				returned.Add(1)
			}
		}(i)
	}
	wg.Wait()
	require.Eventually(t, func() bool { return lates.Load() == expired.Load() }, 5*time.Second, time.Millisecond,
		"every expired call's late runs once")
	require.NotZero(t, returned.Load())
	require.NotZero(t, expired.Load(), "the slow calls on the 20 ms watchdog expire")
	require.EqualValues(t, expired.Load(), ws[0].expired.Load()+ws[1].expired.Load())
	require.Zero(t, ws[1].expired.Load(), "none of the minute-long deadlines expired")
	for _, w := range ws {
		require.Eventually(t, func() bool { return w.stuck.Load() == 0 }, 5*time.Second, time.Millisecond)
	}
}

// A returned call leaves nothing in the monitor's heap.
func TestMonitorForgetsReturnedCalls(t *testing.T) {
	w := &watchdog{timeout: time.Minute}
	for i := 0; i < 100; i++ {
		_, err := w.run("op", w.timeout, func() error { return nil }, nil)
		require.NoError(t, err)
	}
	watches.mu.Lock()
	n := len(watches.h)
	watches.mu.Unlock()
	require.Zero(t, n)
}
