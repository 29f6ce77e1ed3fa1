package conformance

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

const badSize = 4096

// fixture is what a bad-input case can misuse.
type fixture struct {
	t     *testing.T
	e     *env
	a     *alloc.Allocator
	buf   alloc.Buffer      // badSize bytes of pattern(badSize, 42)
	host  *alloc.HostBuffer // badSize bytes
	ws    alloc.Buffer      // workspace "ws"
	x     alloc.Buffer      // scratch handle a case's setup may set
	other *alloc.Allocator  // a second allocator on the same driver
	h2    *alloc.HostBuffer
	g     *alloc.Graph
	after []func() // a case's own cleanup, run once the checks passed
}

// freeLater frees b (from a) after the checks.
func (f *fixture) freeLater(a *alloc.Allocator, b alloc.Buffer) {
	f.after = append(f.after, func() { require.NoError(f.t, a.Free(b)) })
}

// badCase misuses the API once: it must get a typed error and leave the
// allocator exactly as it was, and usable.
type badCase struct {
	name  string
	setup func(f *fixture) // optional, runs before the baseline is taken
	do    func(f *fixture) error
	want  error  // the sentinel the error wraps
	says  string // optional: text the message must contain
}

func allocIn(f *fixture, a *alloc.Allocator, n int64) alloc.Buffer {
	b, err := a.Alloc(n)
	require.NoError(f.t, err)
	return b
}

// The setups cases share, each leaving what it made in the fixture.

// scratchBuffer sets x to 1000 B of f.a, freed after the checks.
func (f *fixture) scratchBuffer() {
	f.x = allocIn(f, f.a, 1000)
	f.freeLater(f.a, f.x)
}

// freedBuffer sets x to a handle of 1000 B already freed.
func (f *fixture) freedBuffer() {
	f.x = allocIn(f, f.a, 1000)
	require.NoError(f.t, f.a.Free(f.x))
}

// foreignBuffer sets x to 1000 B of the other allocator, still valid for
// its owner (which frees it after the checks).
func (f *fixture) foreignBuffer() {
	f.x = allocIn(f, f.other, 1000)
	f.freeLater(f.other, f.x)
}

// closedHostBuffer sets h2 to a pinned buffer already closed.
func (f *fixture) closedHostBuffer() {
	h, err := f.a.HostAlloc(100)
	require.NoError(f.t, err)
	require.NoError(f.t, h.Close())
	f.h2 = h
}

// closedGraph sets g to an empty graph already closed.
func (f *fixture) closedGraph() {
	g, err := f.a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
	require.NoError(f.t, err)
	require.NoError(f.t, g.Close())
	f.g = g
}

var badCases = []badCase{
	{name: "alloc_zero", do: func(f *fixture) error { _, err := f.a.Alloc(0); return err }, want: alloc.ErrInvalidSize},
	{name: "alloc_negative", do: func(f *fixture) error { _, err := f.a.Alloc(-1); return err }, want: alloc.ErrInvalidSize},
	{name: "alloc_sync_zero", do: func(f *fixture) error { _, err := f.a.AllocSync(0); return err }, want: alloc.ErrInvalidSize},
	{name: "alloc_sync_negative", do: func(f *fixture) error { _, err := f.a.AllocSync(-4096); return err }, want: alloc.ErrInvalidSize},
	{name: "host_alloc_zero", do: func(f *fixture) error { _, err := f.a.HostAlloc(0); return err }, want: alloc.ErrInvalidSize},
	{name: "workspace_zero", do: func(f *fixture) error { _, err := f.a.Workspace("w0", 0); return err }, want: alloc.ErrInvalidSize},
	{name: "alloc_larger_than_device", do: func(f *fixture) error {
		_, err := f.a.Alloc(f.a.Info().TotalMemory + 1)
		return err
	}, want: alloc.ErrOutOfMemory, says: "reserved"},
	{name: "alloc_sync_larger_than_device", do: func(f *fixture) error {
		_, err := f.a.AllocSync(f.a.Info().TotalMemory + 1)
		return err
	}, want: alloc.ErrOutOfMemory, says: "reserved"},
	{name: "workspace_larger_than_device", do: func(f *fixture) error {
		_, err := f.a.Workspace("huge", f.a.Info().TotalMemory+1)
		return err
	}, want: alloc.ErrOutOfMemory, says: "reserved"},
	{name: "slice_unaligned", do: func(f *fixture) error { _, err := f.a.Slice(f.buf, 1, 16); return err }, want: alloc.ErrMisaligned},
	{name: "slice_past_end", do: func(f *fixture) error { _, err := f.a.Slice(f.buf, 0, badSize+1); return err }, want: alloc.ErrOutOfRange},
	{name: "slice_negative_offset", do: func(f *fixture) error {
		_, err := f.a.Slice(f.buf, -f.a.Info().Alignment, 16)
		return err
	}, want: alloc.ErrOutOfRange},
	{name: "slice_empty", do: func(f *fixture) error { _, err := f.a.Slice(f.buf, 0, 0); return err }, want: alloc.ErrInvalidSize},
	{name: "upload_out_of_range", do: func(f *fixture) error { return f.a.Upload(f.buf, badSize-100, make([]byte, 200)) }, want: alloc.ErrOutOfRange},
	{name: "upload_negative_offset", do: func(f *fixture) error { return f.a.Upload(f.buf, -1, []byte{1}) }, want: alloc.ErrOutOfRange},
	{name: "download_out_of_range", do: func(f *fixture) error { return f.a.Download(make([]byte, 200), f.buf, badSize-100) }, want: alloc.ErrOutOfRange},
	{name: "upload_host_out_of_range_device", do: func(f *fixture) error {
		return f.a.UploadHost(f.buf, badSize-100, f.host, 0, 200)
	}, want: alloc.ErrOutOfRange},
	{name: "upload_host_out_of_range_host", do: func(f *fixture) error {
		return f.a.UploadHost(f.buf, 0, f.host, badSize-100, 200)
	}, want: alloc.ErrOutOfRange},
	{name: "download_host_out_of_range_host", do: func(f *fixture) error {
		return f.a.DownloadHost(f.host, badSize-100, f.buf, 0, 200)
	}, want: alloc.ErrOutOfRange},
	{name: "download_host_out_of_range_device", do: func(f *fixture) error {
		return f.a.DownloadHost(f.host, 0, f.buf, badSize-100, 200)
	}, want: alloc.ErrOutOfRange},
	{name: "memset_out_of_range", do: func(f *fixture) error { return f.a.Memset(f.buf, badSize-100, 1, 200) }, want: alloc.ErrOutOfRange},
	{name: "memset_negative_length", do: func(f *fixture) error { return f.a.Memset(f.buf, 0, 1, -1) }, want: alloc.ErrOutOfRange},
	{name: "copy_out_of_range_dst", setup: (*fixture).scratchBuffer,
		do: func(f *fixture) error { return f.a.Copy(f.x, 500, f.buf, 0, 600) }, want: alloc.ErrOutOfRange},
	{name: "copy_out_of_range_src", setup: (*fixture).scratchBuffer,
		do: func(f *fixture) error { return f.a.Copy(f.buf, 0, f.x, 500, 600) }, want: alloc.ErrOutOfRange},
	{name: "double_free", setup: (*fixture).freedBuffer, do: func(f *fixture) error { return f.a.Free(f.x) }, want: alloc.ErrInvalidBuffer},
	{name: "use_after_free", setup: (*fixture).freedBuffer, do: func(f *fixture) error { return f.a.Upload(f.x, 0, []byte{1}) }, want: alloc.ErrInvalidBuffer},
	{name: "stale_handle_after_reuse", setup: func(f *fixture) {
		f.freedBuffer()
		y := allocIn(f, f.a, 1000) // most likely the same memory, recycled
		require.NoError(f.t, f.a.Memset(y, 0, 0x33, 1000))
		f.after = append(f.after, func() {
			require.Equal(f.t, repeat(0x33, 1000), download(f.t, f.a, y, 0, 1000), "a stale handle wrote to the new owner's memory")
			require.NoError(f.t, f.a.Free(y))
		})
	}, do: func(f *fixture) error {
		return f.a.Memset(f.x, 0, 0x44, 1000)
	}, want: alloc.ErrInvalidBuffer},
	{name: "stale_handle_double_free_after_reuse", setup: func(f *fixture) {
		f.freedBuffer()
		f.freeLater(f.a, allocIn(f, f.a, 1000))
	}, do: func(f *fixture) error { return f.a.Free(f.x) }, want: alloc.ErrInvalidBuffer},
	{name: "free_foreign_buffer", setup: (*fixture).foreignBuffer, do: func(f *fixture) error { return f.a.Free(f.x) }, want: alloc.ErrInvalidBuffer},
	{name: "upload_foreign_buffer", setup: (*fixture).foreignBuffer, do: func(f *fixture) error { return f.a.Upload(f.x, 0, []byte{1}) }, want: alloc.ErrInvalidBuffer},
	{name: "upload_host_foreign_driver", setup: func(f *fixture) {
		// Pinned memory of another device is not this driver's.
		d := f.e.s.openDriver(f.t)
		o, err := alloc.New(d, alloc.Options{})
		require.NoError(f.t, err)
		f.t.Cleanup(func() { assert.NoError(f.t, o.Close()) })
		h, err := o.HostAlloc(100)
		require.NoError(f.t, err)
		f.t.Cleanup(func() { assert.NoError(f.t, h.Close()) })
		f.h2 = h
	}, do: func(f *fixture) error { return f.a.UploadHost(f.buf, 0, f.h2, 0, 100) }, want: alloc.ErrInvalidBuffer},
	{name: "free_zero_buffer", do: func(f *fixture) error { return f.a.Free(alloc.Buffer{}) }, want: alloc.ErrInvalidBuffer},
	{name: "upload_zero_buffer", do: func(f *fixture) error { return f.a.Upload(alloc.Buffer{}, 0, []byte{1}) }, want: alloc.ErrInvalidBuffer},
	{name: "slice_zero_buffer", do: func(f *fixture) error { _, err := f.a.Slice(alloc.Buffer{}, 0, 1); return err }, want: alloc.ErrInvalidBuffer},
	{name: "free_view", setup: func(f *fixture) {
		v, err := f.a.Slice(f.buf, f.a.Info().Alignment, 100)
		require.NoError(f.t, err)
		f.x = v
	}, do: func(f *fixture) error { return f.a.Free(f.x) }, want: alloc.ErrInvalidBuffer},
	{name: "free_workspace", do: func(f *fixture) error { return f.a.Free(f.ws) }, want: alloc.ErrInvalidBuffer},
	{name: "release_unknown_workspace", do: func(f *fixture) error { return f.a.ReleaseWorkspace("nope") }, want: alloc.ErrInvalidBuffer},
	{name: "free_graph_buffer", setup: func(f *fixture) {
		f.g, f.x = graphWithBuffer(f.t, f.a)
		f.after = append(f.after, func() { require.NoError(f.t, f.g.Close()) })
	}, do: func(f *fixture) error { return f.a.Free(f.x) }, want: alloc.ErrInvalidBuffer},
	{name: "nil_host_buffer", do: func(f *fixture) error { return f.a.UploadHost(f.buf, 0, nil, 0, 1) }, want: alloc.ErrInvalidBuffer},
	{name: "host_buffer_after_close", setup: (*fixture).closedHostBuffer, do: func(f *fixture) error { return f.a.UploadHost(f.buf, 0, f.h2, 0, 10) }, want: alloc.ErrClosed},
	{name: "download_host_after_close", setup: (*fixture).closedHostBuffer, do: func(f *fixture) error { return f.a.DownloadHost(f.h2, 0, f.buf, 0, 10) }, want: alloc.ErrClosed},
	{name: "host_buffer_close_twice", setup: (*fixture).closedHostBuffer, do: func(f *fixture) error { return f.h2.Close() }, want: alloc.ErrClosed},
	{name: "end_without_begin", do: func(f *fixture) error { _, err := f.a.EndCapture(); return err }, want: alloc.ErrNotCapturing},
	{name: "begin_invalid_mode", do: func(f *fixture) error { return f.a.BeginCapture(alloc.CaptureMode(42)) }, want: alloc.ErrInvalidValue},
	{name: "with_capture_nil_fn", do: func(f *fixture) error { _, err := f.a.WithCapture(alloc.CaptureOptions{}, nil); return err }, want: alloc.ErrInvalidValue},
	{name: "graph_launch_after_close", setup: (*fixture).closedGraph, do: func(f *fixture) error { return f.g.Launch() }, want: alloc.ErrClosed},
	{name: "graph_close_twice", setup: (*fixture).closedGraph, do: func(f *fixture) error { return f.g.Close() }, want: alloc.ErrClosed},
}

// graphWithBuffer captures one allocation and returns its graph and buffer.
func graphWithBuffer(t *testing.T, a *alloc.Allocator) (*alloc.Graph, alloc.Buffer) {
	t.Helper()
	var b alloc.Buffer
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
		var err error
		b, err = a.Alloc(1000)
		return err
	})
	require.NoError(t, err)
	return g, b
}

// stillUsable proves the allocator works after a refused call.
func stillUsable(t *testing.T, a *alloc.Allocator) {
	t.Helper()
	b := mustAlloc(t, a, 300)
	upload(t, a, b, 0, pattern(300, 5))
	require.Equal(t, pattern(300, 5), download(t, a, b, 0, 300))
	require.NoError(t, a.Free(b))
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
	require.NoError(t, err, "capture still possible")
	require.NoError(t, g.Close())
}

func (s *suite) badInput(t *testing.T) {
	for _, c := range badCases {
		t.Run(c.name, func(t *testing.T) {
			e := s.env(t)
			f := &fixture{t: t, e: e, a: e.a, other: e.newAllocator(alloc.Options{})}
			f.buf = mustAlloc(t, e.a, badSize)
			upload(t, e.a, f.buf, 0, pattern(badSize, 42))
			f.host = mustHost(t, e.a, badSize)
			ws, err := e.a.Workspace("ws", 1000)
			require.NoError(t, err)
			f.ws = ws
			if c.setup != nil {
				c.setup(f)
			}
			require.NoError(t, e.a.Synchronize())
			base, stats := usageOf(e.a), e.a.Stats()

			err = c.do(f)
			require.ErrorIs(t, err, c.want)
			if c.says != "" {
				assert.Contains(t, err.Error(), c.says)
			}

			assert.Equal(t, base, usageOf(e.a), "a refused call changed the allocator's state")
			assert.Equal(t, stats.Allocs, e.a.Stats().Allocs)
			assert.Equal(t, stats.Frees, e.a.Stats().Frees)
			requireState(t, e.a, alloc.StateNone)
			require.Equal(t, pattern(badSize, 42), download(t, e.a, f.buf, 0, badSize), "a refused call touched memory")
			stillUsable(t, e.a)

			for _, fn := range f.after {
				fn()
			}
			require.NoError(t, e.a.ReleaseWorkspace("ws"))
			require.NoError(t, f.host.Close())
			require.NoError(t, e.a.Free(f.buf))
		})
	}
	s.badInputInCapture(t)
}

// badInputInCapture: misuse during a capture is refused before the driver
// sees it, so the capture survives (a driver would invalidate it).
func (s *suite) badInputInCapture(t *testing.T) {
	// inCapture runs do during an Active capture of the allocator and then
	// requires the capture to end cleanly.
	inCapture := func(t *testing.T, e *env, do func()) {
		t.Helper()
		require.NoError(t, e.a.BeginCapture(alloc.Global))
		before := e.spy.Snapshot()
		do()
		assertNoDriverCall(t, e.spy, before)
		g, err := e.a.EndCapture()
		require.NoError(t, err, "the refused call must not have invalidated the capture")
		launch(t, e.a, g)
		require.NoError(t, g.Close())
	}
	t.Run("nested_begin", func(t *testing.T) {
		e := s.env(t)
		inCapture(t, e, func() {
			for _, m := range driver.Modes() {
				requireRefused(t, e.a.BeginCapture(m), alloc.StateActive, alloc.ErrAlreadyCapturing)
			}
		})
	})
	t.Run("begin_while_invalidated", func(t *testing.T) {
		e := s.env(t)
		require.NoError(t, e.a.BeginCapture(alloc.Global))
		invalidate(t, e, e.a)
		requireRefused(t, e.a.BeginCapture(alloc.Global), alloc.StateInvalidated, alloc.ErrAlreadyCapturing)
		_, err := e.a.EndCapture()
		require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
		stillUsable(t, e.a)
	})
	t.Run("out_of_range_in_capture", func(t *testing.T) {
		e := s.env(t)
		b := mustAlloc(t, e.a, 1000)
		h := mustHost(t, e.a, 1000)
		inCapture(t, e, func() {
			requireRefused(t, e.a.Memset(b, 900, 1, 200), alloc.StateActive, alloc.ErrOutOfRange)
			requireRefused(t, e.a.UploadHost(b, 0, h, 900, 200), alloc.StateActive, alloc.ErrOutOfRange)
			requireRefused(t, e.a.Copy(b, 0, b, 500, 600), alloc.StateActive, alloc.ErrOutOfRange)
			requireRefused(t, e.a.Free(alloc.Buffer{}), alloc.StateActive, alloc.ErrInvalidBuffer)
		})
		require.NoError(t, e.a.Free(b))
		require.NoError(t, h.Close())
	})
	t.Run("free_other_graph_buffer_in_capture", func(t *testing.T) {
		e := s.env(t)
		g1, x := graphWithBuffer(t, e.a)
		inCapture(t, e, func() {
			requireRefused(t, e.a.Free(x), alloc.StateActive, alloc.ErrInvalidBuffer)
		})
		launch(t, e.a, g1)
		require.NoError(t, g1.Close())
	})
	t.Run("graph_close_during_capture", func(t *testing.T) {
		e := s.env(t)
		g1, _ := graphWithBuffer(t, e.a)
		inCapture(t, e, func() {
			// Closing frees memory: the frees would be recorded.
			requireRefused(t, g1.Close(), alloc.StateActive, alloc.ErrCaptureIncompatibleAllocation)
		})
		launch(t, e.a, g1)
		require.NoError(t, g1.Close())
	})
	t.Run("new_nil_driver", func(t *testing.T) {
		_, err := alloc.New(nil, alloc.Options{})
		require.ErrorIs(t, err, alloc.ErrInvalidValue)
	})
}
