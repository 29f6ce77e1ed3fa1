package symheap_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/symheap"
)

// Opening a heap during a capture is refused before any driver call;
// allocating in a capture is arithmetic: no driver call either.
func TestCaptureRules(t *testing.T) {
	g, a, spy := spiedGroupAndAllocator(t)
	var err error

	require.NoError(t, a.BeginCapture(alloc.Global))
	before := spy.Snapshot()
	_, err = g.Open(0, a, symheap.Options{})
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Zero(t, spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus), "no driver call but the status query")
	gr, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, gr.Close())

	h, err := g.Open(0, a, symheap.Options{})
	require.NoError(t, err)
	defer h.Close()
	require.NoError(t, a.BeginCapture(alloc.Global))
	before = spy.Snapshot()
	x, err := h.Alloc(1000)
	require.NoError(t, err)
	y, err := h.Alloc(1000)
	require.NoError(t, err)
	require.Zero(t, spy.Snapshot().Sub(before).Total(), "allocation in the heap makes no driver call")
	require.Equal(t, [2]int64{0, 1000}, [2]int64{x.Off, x.Size})
	require.Equal(t, [2]int64{1024, 1000}, [2]int64{y.Off, y.Size})
	require.ErrorIs(t, h.Reset(), driver.ErrCaptureIllegalOp, "reset frees offsets a graph may hold")
	gr, err = a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, gr.Close())
	require.NoError(t, h.Reset())
	z, err := h.Alloc(10)
	require.NoError(t, err)
	require.Zero(t, z.Off)
}

func TestBadOperandsAreTypedAndQueueNothing(t *testing.T) {
	g, a := groupAndAllocator(t, 2, nil) // rank 1 never opens: nothing may wait for it
	_, err := g.Open(0, a, symheap.Options{Timeout: -time.Second})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	_, err = g.Open(2, a, symheap.Options{})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	h, err := g.Open(0, a, symheap.Options{Timeout: time.Second})
	require.NoError(t, err)
	defer h.Close()
	x, err := h.Alloc(1024)
	require.NoError(t, err)
	y, err := h.Alloc(1024)
	require.NoError(t, err)
	for _, c := range []struct {
		err  error
		call func() error
	}{
		{alloc.ErrOutOfRange, func() error { return h.AllReduce(symheap.Tensor{Off: 1 << 16, Size: 4}, symheap.Int32) }},
		{alloc.ErrInvalidSize, func() error { return h.AllReduce(symheap.Tensor{Off: 0, Size: 6}, symheap.Int32) }},
		{alloc.ErrInvalidValue, func() error { return h.AllReduce(x, symheap.DType(9)) }},
		{alloc.ErrInvalidSize, func() error { return h.AllGather(x, y) }},
		{alloc.ErrInvalidValue, func() error { return h.AllToAll(x, x) }},
		{alloc.ErrInvalidSize, func() error { return h.ReduceScatter(x, y, symheap.Int32) }},
	} {
		require.ErrorIs(t, c.call(), c.err)
	}
	_, err = h.Alloc(1 << 20)
	require.ErrorIs(t, err, symheap.ErrHeapFull)
	_, err = h.Alloc(0)
	require.ErrorIs(t, err, alloc.ErrInvalidSize)
	// Nothing was queued: a lone synchronize returns at once, no barrier.
	require.NoError(t, h.Allocator().Synchronize())
}

// hidden hides the driver's optional interfaces, as a plugin driver lacks
// host functions.
type hidden struct{ driver.Driver }

func TestUnsupportedBackendIsRefused(t *testing.T) {
	g, a := groupAndAllocator(t, 1, func(d driver.Driver) driver.Driver { return hidden{d} })
	_, err := g.Open(0, a, symheap.Options{})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
}

// On a backend without IPC handles (cpu; the Spy in front of it forwards
// the IPC methods, so symheap looks through it) a device heap is refused
// at once, with no driver call but the capture status query and no
// exchange round; during a capture the capture is refused first. Bad
// arguments are typed errors.
func TestOpenDeviceRefusals(t *testing.T) {
	_, a, spy := spiedGroupAndAllocator(t)
	require.False(t, symheap.DeviceRuns(spy), "the Spy forwards IPC, cpu has none")
	require.False(t, symheap.DeviceRuns(a.Driver()))

	x := symheap.NewLocalExchange(2) // rank 1 never comes: a refusal must not wait for it
	before := spy.Snapshot()
	start := time.Now()
	_, err := symheap.OpenDevice(0, a, x, 1<<16, symheap.DeviceOptions{Timeout: 5 * time.Second})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	require.Less(t, time.Since(start), 2*time.Second, "no exchange round")
	require.Zero(t, spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus, alloctest.MethodName), "no driver call but the status query")

	require.NoError(t, a.BeginCapture(alloc.Global))
	before = spy.Snapshot()
	_, err = symheap.OpenDevice(0, a, x, 1<<16, symheap.DeviceOptions{})
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Zero(t, spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus), "no driver call but the status query")
	st, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateActive, st, "the refusal leaves the capture valid")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())

	for _, c := range []struct {
		err  error
		open func() error
	}{
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(2, a, x, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(-1, a, x, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(0, nil, x, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(0, a, nil, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidSize, func() error { _, err := symheap.OpenDevice(0, a, x, 0, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error {
			_, err := symheap.OpenDevice(0, a, x, 1, symheap.DeviceOptions{Timeout: -time.Second})
			return err
		}},
	} {
		require.ErrorIs(t, c.open(), c.err)
	}
}

// groupAndAllocator makes a group of ranks ranks and one cpu allocator
// whose driver wrap may replace (a spy, a wrapper); the test's cleanup
// closes them.
func groupAndAllocator(t *testing.T, ranks int, wrap func(driver.Driver) driver.Driver) (*symheap.Group, *alloc.Allocator) {
	t.Helper()
	g, err := symheap.NewGroup(ranks, 1<<16)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	var drv driver.Driver = d
	if wrap != nil {
		drv = wrap(d)
	}
	a, err := alloc.New(drv, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })
	return g, a
}

// spiedGroupAndAllocator is groupAndAllocator of one rank with an
// alloctest.Spy in front of the driver, counting its calls.
func spiedGroupAndAllocator(t *testing.T) (*symheap.Group, *alloc.Allocator, *alloctest.Spy) {
	t.Helper()
	var spy *alloctest.Spy
	g, a := groupAndAllocator(t, 1, func(d driver.Driver) driver.Driver { spy = alloctest.NewSpy(d); return spy })
	return g, a, spy
}

// A collective that runs after Close, queued or replayed, fails the
// stream with ErrClosed instead of touching unmapped memory; Close twice
// and launching on a closed heap are refused.
func TestClosedHeap(t *testing.T) {
	g, a := groupAndAllocator(t, 1, nil)
	h, err := g.Open(0, a, symheap.Options{Timeout: time.Second})
	require.NoError(t, err)
	x, err := h.Alloc(64)
	require.NoError(t, err)
	require.Len(t, h.Bytes(x), 64)
	gr, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return h.AllReduce(x, symheap.Int32) })
	require.NoError(t, err)
	defer gr.Close()
	require.NoError(t, h.Barrier()) // queued: the cpu stream runs it at the next synchronize
	require.NoError(t, h.Close())
	require.ErrorIs(t, a.Synchronize(), alloc.ErrClosed, "the queued barrier ran after Close")
	require.NoError(t, gr.Launch())
	require.ErrorIs(t, a.Synchronize(), alloc.ErrClosed, "the replayed all-reduce ran after Close")
	require.ErrorIs(t, h.Barrier(), alloc.ErrClosed)
	require.ErrorIs(t, h.Close(), alloc.ErrClosed)
	require.Nil(t, h.Bytes(x))
}

// A rank whose epoch moved ahead (here its pad's arrive word, written
// through the group's file as any process holding it could) no longer
// pairs its barriers with its peer's: the peer, behind, used to pass at
// once (the moved epoch is "later"), and the rank ahead timed out. Both
// now fail at once with ErrCollectiveMismatch naming both ranks' epochs.
func TestEpochMovedAheadIsAMismatch(t *testing.T) {
	const timeout = 5 * time.Second
	g, a0 := groupAndAllocator(t, 2, nil)
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	a1, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a1.Close()) })
	var heaps [2]*symheap.Heap
	for r, a := range []*alloc.Allocator{a0, a1} {
		heaps[r], err = g.Open(r, a, symheap.Options{Timeout: timeout})
		require.NoError(t, err)
		defer heaps[r].Close()
	}
	_, err = g.Files()[0].WriteAt([]byte{5, 0, 0, 0}, 0) // rank 0's epoch: 5 barriers ahead
	require.NoError(t, err)
	errs := make([]error, 2)
	start := time.Now()
	var wg sync.WaitGroup
	for r, h := range heaps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = h.Barrier(); errs[r] == nil {
				errs[r] = h.Synchronize()
			}
		}()
	}
	wg.Wait()
	require.Less(t, time.Since(start), timeout, "found at once, not by a timeout")
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		require.ErrorIs(t, err, symheap.ErrCollectiveMismatch, "rank %d", r)
		// Each names its own epoch; the peer's is as it read it (rank 1
		// may not have arrived yet, rank 0 may be at 5 or 6).
		own := []string{"rank 0 reached epoch 6", "rank 1 reached epoch 1"}[r]
		require.Contains(t, err.Error(), own)
		require.Contains(t, err.Error(), fmt.Sprintf("rank %d was at epoch", 1-r))
	}
}
