package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

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

	err = within(t, wdSlack, "Close with the capture abandoned", func() error { return e.close(e.a) })
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
