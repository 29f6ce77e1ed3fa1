package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// enqueue: Allocator.Enqueue, an engine's own stream work through the
// guard, with the buffers it uses held by the graph that records it.
func (s *suite) enqueue(t *testing.T) {
	runRules(t,
		rule{"recorded_and_held", s.enqueuedWorkRecordedWithItsBuffersHeld},
		rule{"refused_in_external_capture", s.enqueueRefusedInExternalCapture},
		rule{"bad_buffer", s.enqueueOfBadBufferRefused},
	)
}

// enqueuedWorkRecordedWithItsBuffersHeld: in a capture, the work function
// runs once, on the allocator's stream, and is recorded; a buffer it uses
// is not handed out again until the graph closes.
func (s *suite) enqueuedWorkRecordedWithItsBuffersHeld(t *testing.T) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 4096)
	calls := 0
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return e.a.Enqueue("kernel", []alloc.Buffer{b}, func(st driver.Stream) error {
			calls++
			require.Equal(t, e.a.Stream(), st)
			return e.spy.Inner().MemsetAsync(b.Ptr(), 5, 4096, st)
		})
	})
	require.NoError(t, err)
	require.Equal(t, 1, calls, "called once, at capture")
	require.NoError(t, e.a.Free(b))
	next := mustAlloc(t, e.a, 4096)
	assert.False(t, overlaps(next.Ptr(), 4096, b.Ptr(), 4096), "a buffer the recorded work uses is held until the graph closes")
	launch(t, e.a, g)
	require.NoError(t, g.Close())
	require.NoError(t, e.a.Free(next))
}

// enqueueRefusedInExternalCapture: in a capture the allocator did not
// start, Enqueue is refused and never calls the work function.
func (s *suite) enqueueRefusedInExternalCapture(t *testing.T) {
	e := s.env(t)
	e.inExternalCapture(alloc.Global, func() {
		err := e.a.Enqueue("kernel", nil, func(driver.Stream) error { t.Error("called during a capture the allocator did not start"); return nil })
		requireRefused(t, err, alloc.StateExternal, alloc.ErrCaptureIncompatibleAllocation)
	})
}

// enqueueOfBadBufferRefused: a freed buffer is ErrInvalidBuffer, a nil
// work function ErrInvalidValue.
func (s *suite) enqueueOfBadBufferRefused(t *testing.T) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 64)
	require.NoError(t, e.a.Free(b))
	require.ErrorIs(t, e.a.Enqueue("kernel", []alloc.Buffer{b}, func(driver.Stream) error { return nil }), alloc.ErrInvalidBuffer)
	require.ErrorIs(t, e.a.Enqueue("kernel", nil, nil), alloc.ErrInvalidValue)
}
