package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/symheap"
)

// heapCaptureRules: the symmetric heap's rules against a capture, counted
// by the Spy on every backend. Opening a heap (mapping the peers, the
// handle exchange's end) during a capture is refused before any driver
// call but the always-legal status query, and leaves the capture valid;
// allocating in the heap during a capture is arithmetic, no driver call
// at all; a reset during a capture is refused, since graphs hold the
// offsets. Where collectives do not run (a plugin), only the refusal in
// capture is checked: it comes before the backend is even asked.
func (s *suite) heapCaptureRules(t *testing.T) {
	e := s.env(t)
	g, err := symheap.NewGroup(1, 1<<16)
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()

	require.NoError(t, e.a.BeginCapture(alloc.Global))
	before := e.spy.Snapshot()
	_, err = g.Open(0, e.a, symheap.Options{})
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Zero(t, e.spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus), "no driver call but the status query")
	st, err := e.a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateActive, st, "the refusal leaves the capture valid")
	gr, err := e.a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, gr.Close())

	h, err := g.Open(0, e.a, symheap.Options{})
	if errors.Is(err, errors.ErrUnsupported) {
		t.Logf("collectives do not run here; the refusal in capture was checked: %v", err)
		return
	}
	require.NoError(t, err)
	defer func() { require.NoError(t, h.Close()) }()
	x0, err := h.Alloc(3000)
	require.NoError(t, err)
	require.NoError(t, h.Reset())

	require.NoError(t, e.a.BeginCapture(alloc.Global))
	before = e.spy.Snapshot()
	x, err := h.Alloc(3000)
	require.NoError(t, err)
	y, err := h.Alloc(100)
	require.NoError(t, err)
	require.Zero(t, e.spy.Snapshot().Sub(before).Total(), "allocation in the heap makes no driver call")
	require.Equal(t, x0, x, "the same sequence gives the same offsets")
	require.Zero(t, y.Off%symheap.Align)
	require.GreaterOrEqual(t, y.Off, x.Off+x.Size)
	require.ErrorIs(t, h.Reset(), driver.ErrCaptureIllegalOp, "reset frees offsets a graph may hold")
	require.Zero(t, e.a.CaptureAllocCount(), "the allocator made no allocation either")
	gr, err = e.a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, gr.Close())
}
