package conformance

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

const (
	// wdDeadline is the watchdog in these tests: long enough that the
	// work before a deliberate hang (a capture begin, a few allocations
	// over a plugin under -race on a loaded 2-core machine) fits in it.
	wdDeadline = 300 * time.Millisecond
	// wdSlack bounds how late the timeout may come. Generous on purpose:
	// this is about the caller getting control back, not about speed.
	wdSlack = 2 * time.Second
	// wdRecover bounds how long an abandoned call may take to be cleaned up
	// once it finally returns.
	wdRecover = 5 * time.Second
)

// eventually polls cond until it holds or wdRecover passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wdRecover)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, wdRecover)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// abandonCapture runs WithCapture on a with opts, its function running
// body and, if body succeeded, blocking until release is called; it
// returns WithCapture's graph and error, failing the test if WithCapture
// has not returned within wdSlack. release lets the function return and
// waits until it has; it may be called more than once, and runs when the
// test ends if the test has not called it.
func abandonCapture(t *testing.T, a *alloc.Allocator, opts alloc.CaptureOptions, body func() error) (release func(), g *alloc.Graph, err error) {
	t.Helper()
	unblock := make(chan struct{})
	fnDone := make(chan struct{})
	var once sync.Once
	release = func() {
		once.Do(func() { close(unblock) })
		<-fnDone
	}
	t.Cleanup(func() { once.Do(func() { close(unblock) }) })
	err = alloctest.ReturnsWithin(t, wdSlack, "WithCapture", func() (err error) {
		g, err = a.WithCapture(opts, func() error {
			defer close(fnDone)
			if err := body(); err != nil {
				return err
			}
			<-unblock
			return nil
		})
		return err
	})
	return release, g, err
}

// notCapturing is a condition for eventually: a reports StateNone.
func notCapturing(a *alloc.Allocator) func() bool {
	return func() bool {
		st, err := a.CaptureStatus()
		return err == nil && st == alloc.StateNone
	}
}

// watchdog: a stuck captured function or driver call costs the caller at
// most the deadline, and the allocator recovers once it returns.
func (s *suite) watchdog(t *testing.T) {
	runRules(t,
		rule{"busy_stream", s.watchdogBusyStream},
		rule{"capture_fn_timeout", s.watchdogStuckCaptureFnCostsTheDeadline},
		rule{"abandoned_capture_outlives_close", s.abandonedCaptureOutlivesClose},
		rule{"hung_driver_call", s.watchdogHungDriverCallCostsTheDeadline},
		rule{"begin_capture_not_starved", s.watchdogBeginCaptureNotStarved},
		rule{"hung_driver_" + alloctest.MethodBeginCapture.String(), s.watchdogHungCaptureCallHoldsNoLock(alloctest.MethodBeginCapture)},
		rule{"hung_driver_" + alloctest.MethodEndCapture.String(), s.watchdogHungCaptureCallHoldsNoLock(alloctest.MethodEndCapture)},
		rule{"with_capture_timeout_covers_end", s.watchdogCaptureTimeoutCoversTheEnd},
		rule{"abandoned_results_released", s.watchdogAbandonedResultsReleased},
	)
}

// watchdogBusyStream: a Synchronize on a stream whose work does not end
// (a host function that blocks) costs the caller the deadline, whichever
// way the allocator waits: on the backend's own driver, not the suite's
// spy, so a driver that can be polled (driver.StreamIdler, StreamPoller) is
// waited for by polling on the caller's goroutine. Once the work
// ends, the stream synchronizes again.
func (s *suite) watchdogBusyStream(t *testing.T) {
	d := s.openDriver(t)
	if !launchesHostFuncs(d) {
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
	err = alloctest.ReturnsWithin(t, wdSlack, "Synchronize on a busy stream", a.Synchronize)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	assert.GreaterOrEqual(t, elapsed, wdDeadline, "returned before the deadline")
	assert.Less(t, elapsed, wdSlack, "the caller must get control back at the deadline")
	assert.EqualValues(t, 1, a.Stats().Timeouts)

	release()
	eventually(t, "Synchronize works again once the work ended", func() bool { return a.Synchronize() == nil })
}

// watchdogStuckCaptureFnCostsTheDeadline: WithCapture whose function does
// not return gives the caller ErrCaptureTimeout at the capture's Timeout;
// while the function is abandoned the allocator refuses everything with
// that error, and once it returns the capture is released and the
// allocator works again.
func (s *suite) watchdogStuckCaptureFnCostsTheDeadline(t *testing.T) {
	e := s.env(t)
	h := mustHost(t, e.a, 4096)
	b := mustAlloc(t, e.a, 4096)
	base := usageOf(e.a)
	start := time.Now()
	release, g, err := abandonCapture(t, e.a, alloc.CaptureOptions{Mode: alloc.Global, Timeout: wdDeadline},
		func() error { return allocSome(e.a, h) })
	elapsed := time.Since(start)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	require.Nil(t, g)
	assert.GreaterOrEqual(t, elapsed, wdDeadline, "returned before the deadline")
	assert.Less(t, elapsed, wdSlack, "the caller must get control back at the deadline")
	assert.EqualValues(t, 1, e.a.Stats().Timeouts)

	requireAbandonedRefusesAll(t, e.a, b, h)

	release()
	eventually(t, "back to StateNone after fn returned", notCapturing(e.a))
	assert.Equal(t, base, usageOf(e.a), "the abandoned capture leaked")
	require.NoError(t, e.a.Synchronize())
	upload(t, e.a, b, 0, pattern(4096, 1))
	require.Equal(t, pattern(4096, 1), download(t, e.a, b, 0, 4096))
	require.NoError(t, e.a.Free(b))
	require.NoError(t, h.Close())
}

// requireAbandonedRefusesAll: while a capture is abandoned, the allocator
// says so instead of recording into a capture nobody will end.
func requireAbandonedRefusesAll(t *testing.T, a *alloc.Allocator, b alloc.Buffer, h *alloc.HostBuffer) {
	t.Helper()
	_, err := a.Alloc(100)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	require.ErrorIs(t, a.Memset(b, 0, 1, 10), alloc.ErrCaptureTimeout)
	require.ErrorIs(t, a.Synchronize(), alloc.ErrCaptureTimeout)
	require.ErrorIs(t, a.UploadHost(b, 0, h, 0, 10), alloc.ErrCaptureTimeout)
	_, err = a.CaptureStatus()
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	require.ErrorIs(t, a.BeginCapture(alloc.Global), alloc.ErrCaptureTimeout)
}

// abandonedCaptureOutlivesClose: a Global WithCapture whose function is
// stuck past its deadline is abandoned, and the engine closes the
// allocator. Close returns at once; while the function runs, the capture
// may still record, so a sibling's unsafe call is refused. Once the
// function returns, the capture is ended, its graph discarded, the domain
// forgets it (the sibling's unsafe calls are allowed again) and Close's
// teardown runs: nothing the closed allocator held stays with the driver.
// Close and the goroutine waiting for the function must not each leave
// the capture's end to the other: the sibling would be refused forever and
// the driver would keep the memory.
func (s *suite) abandonedCaptureOutlivesClose(t *testing.T) {
	e := s.env(t)
	sib := e.newAllocator(alloc.Options{})
	sibBuf := mustAlloc(t, sib, 4096)
	base, reports := liveBytes(e.drv)
	hbase, _ := hostBytes(e.drv)

	// What Close has to give back once the capture is gone: pool memory,
	// an AllocSync buffer and a pinned host buffer left alive (leaks it
	// reports), besides what the capture allocates.
	mustAlloc(t, e.a, 1<<20)
	_, err := e.a.AllocSync(4096)
	require.NoError(t, err)
	h := mustHost(t, e.a, 4096)

	release, _, err := abandonCapture(t, e.a, alloc.CaptureOptions{Mode: alloc.Global, Timeout: wdDeadline}, func() error { return allocSome(e.a, h) })
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)

	err = alloctest.ReturnsWithin(t, wdSlack, "Close with the capture abandoned", func() error { return e.close(e.a) })
	require.ErrorIs(t, err, alloc.ErrLeaked, "Close reports the capture it aborted and what was left alive")

	// The function may still enqueue into the capture: a Global-mode one
	// forbids the sibling's unsafe calls, refused with no driver call.
	before := e.spy.Snapshot()
	_, err = sib.AllocSync(100)
	requireRefused(t, err, alloc.StateNone, alloc.ErrCaptureIncompatibleAllocation)
	assertNoDriverCall(t, e.spy, before)

	release()
	eventually(t, "the sibling's unsafe calls allowed once the function returned", func() bool {
		x, err := sib.AllocSync(100)
		if err != nil {
			return false
		}
		require.NoError(t, sib.Free(x))
		return true
	})
	eventually(t, "Close's teardown ran: the closed allocator's stream destroyed", func() bool {
		return e.spy.Calls(alloctest.MethodDestroyStream) >= 1
	})
	if reports {
		eventually(t, "the driver holds no memory of the closed allocator", func() bool {
			n, _ := liveBytes(e.drv)
			hn, _ := hostBytes(e.drv)
			return n == base && hn == hbase
		})
	}
	require.NoError(t, sib.Free(sibBuf))
	require.NoError(t, sib.Synchronize())
	g, err := sib.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return nil })
	require.NoError(t, err, "the sibling captures again")
	assert.NoError(t, g.Close())
}

// watchdogHungDriverCallCostsTheDeadline: a driver call that does not
// return costs its caller the deadline (counted in Stats().Timeouts);
// blocking calls behind it fail at once with no driver call, no capture
// begins while it may land in one, and the allocator works again once it
// returns.
func (s *suite) watchdogHungDriverCallCostsTheDeadline(t *testing.T) {
	e := s.newEnv(t, alloc.Options{Watchdog: wdDeadline})
	b := mustAlloc(t, e.a, 4096)
	release := e.spy.Block(alloctest.MethodStreamSynchronize)
	defer release()

	start := time.Now()
	err := alloctest.ReturnsWithin(t, wdSlack, "Synchronize", e.a.Synchronize)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	assert.Less(t, elapsed, wdSlack, "the caller must get control back at the deadline")
	require.EqualValues(t, 1, e.spy.Waiting(alloctest.MethodStreamSynchronize), "the call is still stuck in the driver")
	assert.EqualValues(t, 1, e.a.Stats().Timeouts, "Stats().Timeouts counts every watchdog expiry, driver calls included")

	// While it is stuck, other blocking calls fail at once rather than
	// queue behind it, and make no driver call.
	before := e.spy.Snapshot()
	start = time.Now()
	require.ErrorIs(t, alloctest.ReturnsWithin(t, wdSlack, "Synchronize behind a stuck call", e.a.Synchronize), alloc.ErrCaptureTimeout)
	require.ErrorIs(t, alloctest.ReturnsWithin(t, wdSlack, "Upload behind a stuck call", func() error {
		return e.a.Upload(b, 0, []byte{1, 2, 3})
	}), alloc.ErrCaptureTimeout)
	require.ErrorIs(t, alloctest.ReturnsWithin(t, wdSlack, "AllocSync behind a stuck call", func() error {
		_, err := e.a.AllocSync(100)
		return err
	}), alloc.ErrCaptureTimeout)
	assert.Less(t, time.Since(start), wdDeadline, "calls behind a stuck one must fail at once")
	assertNoDriverCall(t, e.spy, before)

	// A capture cannot begin while an unsafe call may still land in it.
	start = time.Now()
	require.ErrorIs(t, alloctest.ReturnsWithin(t, wdSlack, "BeginCapture", func() error { return e.a.BeginCapture(alloc.Global) }), alloc.ErrCaptureTimeout)
	assert.Less(t, time.Since(start), wdSlack)
	requireState(t, e.a, alloc.StateNone)

	release()
	eventually(t, "Synchronize works again after the driver call returned", func() bool {
		return e.a.Synchronize() == nil
	})
	upload(t, e.a, b, 0, pattern(4096, 2))
	require.Equal(t, pattern(4096, 2), download(t, e.a, b, 0, 4096))
	require.NoError(t, e.a.Free(b))
}

// watchdogBeginCaptureNotStarved: busy goroutines looping unsafe calls on
// a sibling allocator must not keep a Global capture begin from the gate:
// a waiting begin holds new unsafe calls back and waits only for those in
// flight (alloc's TestGateWaitingBeginHoldsNewCallsBack shows the order
// step by step). How long the calls in flight take is the machine's and
// the driver's speed (a plugin's upload under -race on a loaded machine
// can take longer than a short deadline), so the deadline here only
// bounds a hang: every begin must get the gate, none may time out.
func (s *suite) watchdogBeginCaptureNotStarved(t *testing.T) {
	e := s.newEnv(t, alloc.Options{Watchdog: testWatchdog})
	b := e.newAllocator(alloc.Options{})
	buf := mustAlloc(t, b, 1<<16)
	src := pattern(1<<16, 3)
	var uploads atomic.Int64
	stop := alloctest.LoopUntilStopped(t, 8, func(int) bool {
		if b.Upload(buf, 0, src) == nil { // refused while A captures: fine
			uploads.Add(1)
		}
		return true
	})
	for range 10 {
		// each begin asks while the uploads run
		n := uploads.Load()
		eventually(t, "an upload between the begins", func() bool { return uploads.Load() > n })
		err := alloctest.ReturnsWithin(t, testWatchdog+wdSlack, "BeginCapture", func() error { return e.a.BeginCapture(alloc.Global) })
		require.NoError(t, err, "the capture begin starved behind the uploads")
		g, err := e.a.EndCapture()
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	stop()
	require.NoError(t, b.Free(buf))
}

// watchdogHungCaptureCallHoldsNoLock: a capture begin or end (m) stuck in
// the driver costs the caller the deadline, and holds no lock: the
// allocator answers (ErrCaptureTimeout) and a sibling's unsafe call is
// refused, not hung. Once the driver returns, all is released.
func (s *suite) watchdogHungCaptureCallHoldsNoLock(m alloctest.Method) func(t *testing.T) {
	return func(t *testing.T) {
		e := s.newEnv(t, alloc.Options{Watchdog: wdDeadline})
		b := e.newAllocator(alloc.Options{})
		bbuf := mustAlloc(t, b, 1000)
		pre := mustAlloc(t, e.a, 1000)
		base := usageOf(e.a)
		if m == alloctest.MethodEndCapture {
			require.NoError(t, e.a.BeginCapture(alloc.Global))
			_, err := e.a.Alloc(100) // a graph allocation the end must release
			require.NoError(t, err)
		}
		release := e.spy.Block(m)
		defer release()
		start := time.Now()
		err := alloctest.ReturnsWithin(t, wdSlack, m.String(), func() error {
			if m == alloctest.MethodBeginCapture {
				return e.a.BeginCapture(alloc.Global)
			}
			_, err := e.a.EndCapture()
			return err
		})
		require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
		assert.Less(t, time.Since(start), wdSlack)
		err = alloctest.ReturnsWithin(t, wdSlack, "Alloc during the stuck call", func() error { _, err := e.a.Alloc(100); return err })
		require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
		err = alloctest.ReturnsWithin(t, wdSlack, "sibling's Synchronize during the stuck call", b.Synchronize)
		require.ErrorIs(t, err, alloc.ErrSyncDuringCapture, "a capture may have begun: the sibling is refused, not hung")
		release()
		eventually(t, "back to StateNone after the driver returned", notCapturing(e.a))
		eventually(t, "the sibling may synchronize again", func() bool { return b.Synchronize() == nil })
		assert.Equal(t, base, usageOf(e.a), "the abandoned capture leaked")
		g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return e.a.Memset(pre, 0, 1, 1000) })
		require.NoError(t, err, "capturing again after recovery")
		require.NoError(t, g.Close())
		require.NoError(t, e.a.Free(pre))
		require.NoError(t, b.Free(bbuf))
	}
}

// watchdogCaptureTimeoutCoversTheEnd: the allocator's watchdog is long;
// the capture's Timeout must bound a stuck EndCapture too.
func (s *suite) watchdogCaptureTimeoutCoversTheEnd(t *testing.T) {
	e := s.env(t)
	release := e.spy.Block(alloctest.MethodEndCapture)
	defer release()
	start := time.Now()
	err := alloctest.ReturnsWithin(t, wdSlack, "WithCapture", func() error {
		_, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global, Timeout: wdDeadline}, func() error { return nil })
		return err
	})
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	assert.Less(t, time.Since(start), wdSlack)
	release()
	eventually(t, "back to StateNone", notCapturing(e.a))
}

// watchdogAbandonedResultsReleased: an allocating call abandoned by the
// watchdog that later succeeds has no caller left to free its result:
// the allocator must.
func (s *suite) watchdogAbandonedResultsReleased(t *testing.T) {
	for _, c := range []struct {
		name   string
		method alloctest.Method
		do     func(a *alloc.Allocator) error
	}{
		{"alloc_sync", alloctest.MethodMalloc, func(a *alloc.Allocator) error { _, err := a.AllocSync(4096); return err }},
		{"host_alloc", alloctest.MethodHostAlloc, func(a *alloc.Allocator) error { _, err := a.HostAlloc(4096); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := s.newEnv(t, alloc.Options{Watchdog: wdDeadline})
			base := usageOf(e.a)
			release := e.spy.Block(c.method)
			defer release()
			require.ErrorIs(t, alloctest.ReturnsWithin(t, wdSlack, c.name, func() error { return c.do(e.a) }), alloc.ErrCaptureTimeout)
			release()
			eventually(t, "the stuck call returned", func() bool { return e.a.Synchronize() == nil })
			assert.Equal(t, base, usageOf(e.a), "the abandoned call's result is nobody's and must be released")
		})
	}
}
