package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Stats can be right while the driver still holds the memory. For backends
// that report their own usage (driver.UsageReporter: cpu does), check that
// every way a graph or capture ends gives the device memory back.

// hostBytes is driverUsage's pinned host bytes.
func hostBytes(d driver.Driver) (int64, bool) {
	u, ok := driverUsage(d)
	return u.Host, ok
}

// leakScenario ends a graph or capture one way; closed says it closed the
// allocator itself.
type leakScenario struct {
	name string
	run  func(t *testing.T, e *env) (closed bool)
}

var leakScenarios = []leakScenario{
	{"graph_unlaunched_closed", graphUnlaunchedClosed},
	{"graph_launched_closed", graphLaunchedClosed},
	{"graph_freeing_its_allocations", graphFreeingItsAllocations},
	{"fn_error", captureFnError},
	{"invalidated", captureInvalidated},
	{"abandoned_capture", captureAbandoned},
	{"open_capture_at_close", captureOpenAtClose},
	{"leaked_at_close", leakedAtClose},
	{"trim", trimAfterFrees},
}

func (s *suite) leaks(t *testing.T) {
	for _, sc := range leakScenarios {
		t.Run(sc.name, func(t *testing.T) { s.driverUsageBackAfter(t, sc) })
	}
}

// driverUsageBackAfter runs sc with an allocator and then checks the
// driver's usage is back to where it was once the allocator trimmed (or
// closed).
func (s *suite) driverUsageBackAfter(t *testing.T, sc leakScenario) {
	e := s.env(t)
	base, ok := liveBytes(e.drv)
	hbase, _ := hostBytes(e.drv)
	if !ok {
		t.Logf("%s does not report LiveBytes: only the allocator's Stats are checked", e.drv.Name())
	}
	if !sc.run(t, e) {
		require.NoError(t, e.a.Trim())
		require.NoError(t, e.a.Synchronize())
		assert.Zero(t, e.a.Stats().BytesReserved, "Stats says memory is still reserved")
	}
	if n, ok := liveBytes(e.drv); ok {
		assert.Equal(t, base, n, "device bytes held by the driver after the graph/capture ended")
	}
	if n, ok := hostBytes(e.drv); ok {
		assert.Equal(t, hbase, n, "pinned bytes held by the driver")
	}
}

// capAlloc makes graph allocations of a small and a large size class.
func capAlloc(a *alloc.Allocator) error {
	for _, n := range []int64{1000, 1 << 20} {
		if _, err := a.Alloc(n); err != nil {
			return err
		}
	}
	return nil
}

func graphUnlaunchedClosed(t *testing.T, e *env) bool {
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { return capAlloc(e.a) })
	require.NoError(t, err)
	require.NoError(t, g.Close())
	return false
}

func graphLaunchedClosed(t *testing.T, e *env) bool {
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { return capAlloc(e.a) })
	require.NoError(t, err)
	launch(t, e.a, g)
	launch(t, e.a, g)
	require.NoError(t, g.Close())
	return false
}

func graphFreeingItsAllocations(t *testing.T, e *env) bool {
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error {
		b, err := e.a.Alloc(1 << 20)
		if err != nil {
			return err
		}
		return e.a.Free(b)
	})
	require.NoError(t, err)
	launch(t, e.a, g)
	require.NoError(t, g.Close())
	return false
}

func captureFnError(t *testing.T, e *env) bool {
	_, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := capAlloc(e.a); err != nil {
			return err
		}
		return errBoom
	})
	require.ErrorIs(t, err, errBoom)
	return false
}

func captureInvalidated(t *testing.T, e *env) bool {
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	require.NoError(t, capAlloc(e.a))
	invalidate(t, e, e.a)
	_, err := e.a.EndCapture()
	require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
	return false
}

func captureAbandoned(t *testing.T, e *env) bool {
	release, _, err := abandonCapture(t, e.a, alloc.CaptureOptions{Timeout: wdDeadline}, func() error { return capAlloc(e.a) })
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	release()
	eventually(t, "abandoned capture cleaned up", notCapturing(e.a))
	return false
}

func captureOpenAtClose(t *testing.T, e *env) bool {
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	require.NoError(t, capAlloc(e.a))
	require.Error(t, e.close(e.a))
	return true
}

func leakedAtClose(t *testing.T, e *env) bool {
	mustAlloc(t, e.a, 1000)
	_, err := e.a.AllocSync(1000)
	require.NoError(t, err)
	mustHost(t, e.a, 1000)
	g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { return capAlloc(e.a) })
	require.NoError(t, err)
	launch(t, e.a, g)
	_, err = e.a.WithCapture(alloc.CaptureOptions{}, func() error { return capAlloc(e.a) })
	require.NoError(t, err)
	require.ErrorIs(t, e.close(e.a), alloc.ErrLeaked)
	return true
}

func trimAfterFrees(t *testing.T, e *env) bool {
	var bs []alloc.Buffer
	for _, n := range aliasSizes {
		bs = append(bs, mustAlloc(t, e.a, n))
	}
	freeAll(t, e.a, bs)
	return false
}
