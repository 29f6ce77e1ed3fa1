package plugin

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// asyncFailures flattens err into the pipelined operations it reports, in
// order.
func asyncFailures(err error) (ops []*AsyncError) {
	var walk func(error)
	walk = func(e error) {
		switch x := e.(type) {
		case nil:
		case *AsyncError:
			ops = append(ops, x)
		case interface{ Unwrap() []error }:
			for _, y := range x.Unwrap() {
				walk(y)
			}
		default:
			walk(errors.Unwrap(e))
		}
	}
	walk(err)
	return ops
}

func opsOf(errs []*AsyncError) []string {
	var s []string
	for _, e := range errs {
		s = append(s, fmt.Sprintf("%s@%#x", e.Op, uint64(e.Stream)))
	}
	return s
}

// What the allocator's hot path asks of a driver, counted in process: a
// pooled pair makes only the two capture-status checks, a memset one check
// and the MemsetAsync. Those are what the plugin host must make cheap.
func TestHotPathDriverCalls(t *testing.T) {
	drv, err := backends.OpenDriver(ctx, "cpu")
	require.NoError(t, err)
	spy := alloctest.NewSpy(drv)
	a, err := alloc.New(spy, alloc.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()); require.NoError(t, drv.Close()) }()
	b, err := a.Alloc(256)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))

	before := spy.Snapshot()
	b, err = a.Alloc(256)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
	pair := spy.Snapshot().Sub(before)
	assert.Equal(t, int64(2), pair[alloctest.MethodStreamCaptureStatus], pair.String())
	assert.Equal(t, int64(2), pair.Total(), "a pool hit makes no other driver call: %v", pair)

	b, err = a.Alloc(256)
	require.NoError(t, err)
	before = spy.Snapshot()
	require.NoError(t, a.Memset(b, 0, 1, 256))
	memset := spy.Snapshot().Sub(before)
	assert.Equal(t, int64(1), memset[alloctest.MethodStreamCaptureStatus], memset.String())
	assert.Equal(t, int64(1), memset[alloctest.MethodMemsetAsync], memset.String())
	assert.Equal(t, int64(2), memset.Total(), memset.String())
	require.NoError(t, a.Free(b))
}

// Over the plugin those calls make no round trip: the status is the host's
// own, and the memsets go out in batches.
func TestHotPathWithoutRoundTrips(t *testing.T) {
	d := open(t, "plugin:cpu")
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	b, err := a.Alloc(256)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))

	trips := d.trips.Load()
	for range 100 {
		b, err = a.Alloc(256)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	require.Equal(t, trips, d.trips.Load(), "100 pooled pairs made round trips")

	b, err = a.Alloc(256)
	require.NoError(t, err)
	trips = d.trips.Load()
	const n = 5000 // several batches' worth: the queue's bound is 1024
	for i := range n {
		require.NoError(t, a.Memset(b, 0, byte(i), 256))
	}
	got := make([]byte, 256)
	require.NoError(t, a.Download(got, b, 0))
	require.Equal(t, bytes.Repeat([]byte{byte((n - 1) % 256)}, 256), got, "every memset ran, in order")
	made := d.trips.Load() - trips
	t.Logf("%d memsets and a download: %d round trips", n, made)
	assert.Less(t, made, int64(n/100))
	require.NoError(t, a.Free(b))
}

// The host answers the capture status from what the backend's replies
// said, including an invalidation the backend decided on its own.
func TestCaptureStatusTrackedByTheHost(t *testing.T) {
	d, s := openStream(t, "plugin:cpu")
	status := func(want driver.CaptureStatus) {
		t.Helper()
		trips := d.trips.Load()
		st, err := d.StreamCaptureStatus(s)
		require.NoError(t, err)
		require.Equal(t, want, st)
		require.Equal(t, trips, d.trips.Load(), "answered without a round trip")
	}
	// invalidatedBy makes op in a Global capture, where it is illegal:
	// the backend invalidates the capture and the host learns it from the
	// op's reply; the capture ends refused.
	invalidatedBy := func(op func() error) {
		t.Helper()
		require.NoError(t, d.BeginCapture(s, alloc.Global))
		status(driver.CaptureActive)
		require.ErrorIs(t, op(), driver.ErrCaptureIllegalOp)
		status(driver.CaptureInvalidated)
		_, err := d.EndCapture(s)
		require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
		status(driver.CaptureNone)
	}
	status(driver.CaptureNone)
	invalidatedBy(func() error { _, err := d.StreamQuery(s); return err })
	// A device-wide call on no stream at all breaks a Global capture (the
	// backend's rule, as CUDA's).
	invalidatedBy(func() error { _, err := d.Malloc(64); return err })

	// A begin that fails leaves it as it was.
	require.NoError(t, d.BeginCapture(s, alloc.ThreadLocal))
	require.ErrorIs(t, d.BeginCapture(s, alloc.ThreadLocal), alloc.ErrAlreadyCapturing)
	status(driver.CaptureActive)
	g, err := d.EndCapture(s)
	require.NoError(t, err)
	require.NoError(t, d.GraphDestroy(g))
	status(driver.CaptureNone)

	// A stream the host does not know is the backend's to answer.
	trips := d.trips.Load()
	_, err = d.StreamCaptureStatus(driver.Stream(123456))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Equal(t, trips+1, d.trips.Load())
	require.NoError(t, d.DestroyStream(s))
	_, err = d.StreamCaptureStatus(s)
	require.ErrorIs(t, err, alloc.ErrInvalidValue, "destroyed")

	require.NoError(t, d.Close())
	_, err = d.StreamCaptureStatus(s)
	require.ErrorIs(t, err, alloc.ErrClosed)
}

// A capture begun behind the allocator's back (through the host driver:
// the only way to reach a plugin stream) is External at once, with no
// round trip, and the refused call reaches nothing.
func TestExternalCaptureSeenWithoutRoundTrip(t *testing.T) {
	d := open(t, "plugin:cpu")
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	require.NoError(t, d.BeginCapture(a.Stream(), alloc.Global))
	trips := d.trips.Load()
	_, err = a.Alloc(123 << 10)
	require.ErrorIs(t, err, alloc.ErrCaptureIncompatibleAllocation)
	st, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateExternal, st)
	require.Equal(t, trips, d.trips.Load(), "refused and classified without a round trip")
	g, err := d.EndCapture(a.Stream())
	require.NoError(t, err)
	require.NoError(t, d.GraphDestroy(g))
	st, err = a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateNone, st)
}

// A pipelined operation's failure comes back from the next synchronizing
// call on its stream, before the call's own error, in the order they ran,
// typed, once; another stream's stay with that stream.
func TestPipelinedFailuresAtNextSync(t *testing.T) {
	d, s := openStream(t, "plugin:cpu")
	s2, err := d.CreateStream()
	require.NoError(t, err)
	p, err := d.MallocAsync(4096, s)
	require.NoError(t, err)

	require.NoError(t, d.MemsetAsync(12345, 1, 10, s), "queued: no error yet")
	require.NoError(t, d.MemsetAsync(p, 7, 4096, s))
	require.NoError(t, d.MemsetAsync(54321, 1, 10, s2))
	require.NoError(t, d.CopyDtoDAsync(p, 999, 16, s))
	require.NoError(t, d.GraphLaunch(driver.GraphExec(777), s))

	err = d.StreamSynchronize(s)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	fails := asyncFailures(err)
	want := []string{"MemsetAsync", "CopyDtoDAsync", "GraphLaunch"}
	for i := range want {
		want[i] = fmt.Sprintf("%s@%#x", want[i], uint64(s))
	}
	require.Equal(t, want, opsOf(fails), "%v", err)
	for _, f := range fails {
		require.ErrorIs(t, f, alloc.ErrInvalidValue)
	}
	require.Contains(t, err.Error(), "pipelined MemsetAsync")
	require.NoError(t, d.StreamSynchronize(s), "reported once")

	got := make([]byte, 4096)
	require.NoError(t, d.CopyDtoH(got, p, s))
	require.Equal(t, bytes.Repeat([]byte{7}, 4096), got, "the good memset between them ran")

	_, err = d.StreamQuery(s2)
	require.Equal(t, []string{fmt.Sprintf("MemsetAsync@%#x", uint64(s2))}, opsOf(asyncFailures(err)), "%v", err)

	// A blocking copy and DestroyStream report them too.
	require.NoError(t, d.FreeAsync(driver.DevicePtr(4242), s))
	err = d.CopyHtoD(p, make([]byte, 16), s)
	require.Equal(t, []string{fmt.Sprintf("FreeAsync@%#x", uint64(s))}, opsOf(asyncFailures(err)), "%v", err)
	require.NoError(t, d.MemsetAsync(12345, 1, 10, s2))
	err = d.DestroyStream(s2)
	require.Len(t, asyncFailures(err), 1, "%v", err)
	_, err = d.StreamCaptureStatus(s2)
	require.ErrorIs(t, err, alloc.ErrInvalidValue, "the stream was destroyed all the same")

	require.NoError(t, d.FreeAsync(p, s))
	require.NoError(t, d.StreamSynchronize(s))
}

// Past the failures kept per stream, the rest are counted in one.
func TestPipelinedFailuresBounded(t *testing.T) {
	d, s := openStream(t, "plugin:cpu")
	for range maxFailedKept + 10 {
		require.NoError(t, d.MemsetAsync(12345, 1, 10, s))
	}
	err := d.StreamSynchronize(s)
	require.Len(t, asyncFailures(err), maxFailedKept+1)
	require.Contains(t, err.Error(), "10 more pipelined operations")
}

// Every call runs after what was queued before it, so a pipelined memset
// is never overtaken by a synchronous free of its memory, or by a read.
func TestPipelinedOrderedWithCalls(t *testing.T) {
	d := open(t, "plugin:cpu")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := d.CreateStream()
			require.NoError(t, err)
			for i := range 50 {
				p, err := d.Malloc(1024)
				require.NoError(t, err)
				v := byte(g*50 + i)
				require.NoError(t, d.MemsetAsync(p, v, 1024, s))
				got := make([]byte, 1024)
				require.NoError(t, d.CopyDtoH(got, p, s))
				require.Equal(t, bytes.Repeat([]byte{v}, 1024), got)
				require.NoError(t, d.MemsetAsync(p, v+1, 1024, s))
				require.NoError(t, d.Free(p)) // device-wide: runs the queued memset first
			}
			require.NoError(t, d.StreamSynchronize(s), "no memset ran after its memory was freed")
			require.NoError(t, d.DestroyStream(s))
		}()
	}
	wg.Wait()
}

// During a capture nothing is pipelined: a refused call fails where it is
// made and invalidates the capture then, as the capture contract needs.
func TestNothingPipelinedDuringCapture(t *testing.T) {
	d, s := openStream(t, "plugin:cpu")
	other, err := d.CreateStream()
	require.NoError(t, err)
	p, err := d.Malloc(64)
	require.NoError(t, err)
	require.NoError(t, d.BeginCapture(s, alloc.Global))
	require.NoError(t, d.MemsetAsync(p, 9, 64, s))
	g, err := d.EndCapture(s)
	require.NoError(t, err)
	e, err := d.GraphInstantiate(g, false)
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, d.GraphLaunch(e, s), "pipelined")
	}
	got := make([]byte, 64)
	require.NoError(t, d.CopyDtoH(got, p, s))
	require.Equal(t, bytes.Repeat([]byte{9}, 64), got, "the pipelined launches ran")

	require.NoError(t, d.BeginCapture(s, alloc.ThreadLocal))
	require.ErrorIs(t, d.MemsetAsync(12345, 1, 10, other), alloc.ErrInvalidValue, "a capture elsewhere: at once")
	st, err := d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, driver.CaptureActive, st, "a failure on another stream leaves it")
	require.ErrorIs(t, d.GraphLaunch(e, s), driver.ErrCaptureIllegalOp, "into the capture: at once")
	st, err = d.StreamCaptureStatus(s)
	require.NoError(t, err)
	require.Equal(t, driver.CaptureInvalidated, st)
	_, err = d.EndCapture(s)
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	require.NoError(t, d.MemsetAsync(12345, 1, 10, other), "queued again")
	require.Error(t, d.StreamSynchronize(other))
	require.NoError(t, d.GraphExecDestroy(e))
	require.NoError(t, d.GraphDestroy(g))
	require.NoError(t, d.Free(p))
}

// A pipelined operation that hangs in the backend is caught by the next
// synchronizing call, within plugin.call_timeout, and the backend killed.
func TestPipelinedHangCaughtAtNextSync(t *testing.T) {
	const deadline = 300 * time.Millisecond
	d, s := openStream(t, "plugin:faulty:memset=hang,plugin.call_timeout=300ms")
	p, err := d.Malloc(64)
	require.NoError(t, err)

	start := time.Now()
	require.NoError(t, d.MemsetAsync(p, 1, 64, s))
	require.Less(t, time.Since(start), deadline/2, "queued, not waited for")
	err = d.StreamSynchronize(s)
	elapsed := time.Since(start)
	require.ErrorIs(t, err, driver.ErrBackendHung)
	require.Contains(t, err.Error(), "pipelined")
	assert.Less(t, elapsed, deadline+time.Second)
	requireGone(t, d.PID(), time.Second)
	require.ErrorIs(t, d.MemsetAsync(p, 1, 64, s), driver.ErrBackendHung, "later ones fail at once")
}

// With the allocator's watchdog shorter than the call deadline, the
// synchronize behind a hung pipelined memset aborts the backend at the
// watchdog's deadline.
func TestWatchdogAbortsHungPipelinedOp(t *testing.T) {
	d := open(t, "plugin:faulty:memset=hang,plugin.call_timeout=1m")
	a, err := alloc.New(d, alloc.Options{Watchdog: 100 * time.Millisecond})
	require.NoError(t, err)
	b, err := a.Alloc(64)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, a.Memset(b, 0, 1, 64))
	err = a.Synchronize()
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	assert.Less(t, time.Since(start), time.Second)
	requireGone(t, d.PID(), time.Second)
	require.Eventually(t, func() bool {
		err := a.Memset(b, 0, 1, 64)
		return errors.Is(err, driver.ErrBackendHung)
	}, 5*time.Second, 5*time.Millisecond)
}

// A backend that dies running pipelined operations: the next call says
// so, with the exit status, as for any call.
func TestCrashDuringPipelinedOps(t *testing.T) {
	d, s := openStream(t, "plugin:faulty:memset=exit-9")
	p, err := d.Malloc(64)
	require.NoError(t, err)
	require.NoError(t, d.MemsetAsync(p, 1, 64, s))
	err = d.StreamSynchronize(s)
	require.ErrorIs(t, err, driver.ErrBackendCrashed)
	require.Contains(t, err.Error(), "exit status 9")
	require.Eventually(t, func() bool {
		return errors.Is(d.MemsetAsync(p, 1, 64, s), driver.ErrBackendCrashed)
	}, crashBound, time.Millisecond, "queued ones fail at once")
	requireGone(t, d.PID(), time.Second)
}
