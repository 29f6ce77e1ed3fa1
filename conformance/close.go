package conformance

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// sentinels is every error the alloc package exports, for checks that an
// error is classifiable at all.
var sentinels = []error{
	alloc.ErrCaptureIncompatibleAllocation, alloc.ErrSyncDuringCapture, alloc.ErrCaptureInvalidated,
	alloc.ErrCaptureTimeout, alloc.ErrNotCapturing, alloc.ErrAlreadyCapturing, driver.ErrCaptureIllegalOp,
	driver.ErrCaptureUnavailable, alloc.ErrOutOfMemory, alloc.ErrInvalidBuffer, alloc.ErrInvalidSize,
	alloc.ErrOutOfRange, alloc.ErrMisaligned, alloc.ErrInvalidValue, alloc.ErrClosed, alloc.ErrLeaked,
	driver.ErrBackendUnavailable, driver.ErrDriver,
}

// close: Close reports what was left alive, and everything after it is
// refused with ErrClosed.
func (s *suite) close(t *testing.T) {
	runRules(t,
		rule{"clean", s.closeCleanAllocator},
		rule{"twice", s.closeTwiceIsErrClosed},
		rule{"use_after_close", s.everyCallAfterCloseIsErrClosed},
		rule{"leak_reported", s.closeReportsEveryLeak},
		rule{"open_capture_aborted", s.closeAbortsAnOpenCapture},
	)
}

func (s *suite) closeCleanAllocator(t *testing.T) {
	e := s.env(t)
	b := mustAlloc(t, e.a, 1000)
	require.NoError(t, e.a.Free(b))
	_, err := e.a.Workspace("w", 1000) // owned by the allocator: not a leak
	require.NoError(t, err)
	require.NoError(t, e.close(e.a))
}

func (s *suite) closeTwiceIsErrClosed(t *testing.T) {
	e := s.env(t)
	require.NoError(t, e.close(e.a))
	require.ErrorIs(t, e.a.Close(), alloc.ErrClosed)
}

// callAfterClose is one call on a closed allocator, given a buffer, a
// host buffer and a graph it left alive.
type callAfterClose struct {
	name string
	do   func(a *alloc.Allocator, b alloc.Buffer, h *alloc.HostBuffer, g *alloc.Graph) error
}

var callsAfterClose = []callAfterClose{
	{"alloc", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		_, err := a.Alloc(100)
		return err
	}},
	{"alloc_sync", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		_, err := a.AllocSync(100)
		return err
	}},
	{"host_alloc", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		_, err := a.HostAlloc(100)
		return err
	}},
	{"workspace", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		_, err := a.Workspace("w", 100)
		return err
	}},
	{"free", func(a *alloc.Allocator, b alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error { return a.Free(b) }},
	{"slice", func(a *alloc.Allocator, b alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		_, err := a.Slice(b, 0, 10)
		return err
	}},
	{"upload", func(a *alloc.Allocator, b alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.Upload(b, 0, []byte{1})
	}},
	{"download", func(a *alloc.Allocator, b alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.Download(make([]byte, 1), b, 0)
	}},
	{"upload_host", func(a *alloc.Allocator, b alloc.Buffer, h *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.UploadHost(b, 0, h, 0, 1)
	}},
	{"memset", func(a *alloc.Allocator, b alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.Memset(b, 0, 1, 1)
	}},
	{"synchronize", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.Synchronize()
	}},
	{"begin_capture", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.BeginCapture(alloc.Global)
	}},
	{"with_capture", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		_, err := a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
		return err
	}},
	{"graph_launch", func(_ *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, g *alloc.Graph) error {
		return g.Launch()
	}},
	{"trim", func(a *alloc.Allocator, _ alloc.Buffer, _ *alloc.HostBuffer, _ *alloc.Graph) error {
		return a.Trim()
	}},
}

func (s *suite) everyCallAfterCloseIsErrClosed(t *testing.T) {
	for _, c := range callsAfterClose {
		t.Run(c.name, func(t *testing.T) {
			e := s.env(t)
			b := mustAlloc(t, e.a, 100)
			h := mustHost(t, e.a, 100)
			g, err := e.a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
			require.NoError(t, err)
			require.ErrorIs(t, e.close(e.a), alloc.ErrLeaked) // b, h and g were left alive on purpose
			require.ErrorIs(t, c.do(e.a, b, h, g), alloc.ErrClosed)
		})
	}
}

func (s *suite) closeReportsEveryLeak(t *testing.T) {
	leaks := []struct {
		name string
		make func(t *testing.T, a *alloc.Allocator)
	}{
		{"buffer", func(t *testing.T, a *alloc.Allocator) { mustAlloc(t, a, 1000) }},
		{"alloc_sync_buffer", func(t *testing.T, a *alloc.Allocator) {
			_, err := a.AllocSync(1000)
			require.NoError(t, err)
		}},
		{"host_buffer", func(t *testing.T, a *alloc.Allocator) { mustHost(t, a, 1000) }},
		{"graph", func(t *testing.T, a *alloc.Allocator) { graphWithBuffer(t, a) }},
	}
	for _, l := range leaks {
		t.Run(l.name, func(t *testing.T) {
			e := s.env(t)
			l.make(t, e.a)
			require.ErrorIs(t, e.close(e.a), alloc.ErrLeaked)
		})
	}
}

func (s *suite) closeAbortsAnOpenCapture(t *testing.T) {
	e := s.env(t)
	require.NoError(t, e.a.BeginCapture(alloc.Global))
	err := e.close(e.a)
	require.Error(t, err, "Close must report the capture it aborted")
	assert.True(t, isSentinel(err), "Close's error wraps no alloc sentinel: %v", err)
	assert.ErrorIs(t, err, alloc.ErrLeaked, "an open capture is something left alive at Close")
}

// isSentinel reports whether err wraps one of alloc's sentinels.
func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
