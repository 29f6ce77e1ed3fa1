package alloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cpu"
)

// hostAllocator is an allocator on an emulated device (opts) behind a
// recording driver.
func hostAllocator(t *testing.T, dopts cpu.Options, opts alloc.Options) (*cpu.Driver, *alloc.Allocator, *alloctest.Spy) {
	t.Helper()
	d, err := cpu.New(dopts)
	require.NoError(t, err)
	s := alloctest.NewSpy(d)
	a, err := alloc.New(s, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.Zero(t, d.HostBytes(), "pinned host memory left after Close")
		require.NoError(t, d.Close())
	})
	return d, a, s
}

func first(h *alloc.HostBuffer) *byte { return &h.Bytes()[0] }

// Under strict safety (GB10) a HostAlloc the cache serves is allowed
// during any capture and makes no driver call; one it cannot serve is a
// pinning, refused before the driver; a cached buffer's Close is allowed.
func TestHostCacheServesCapturesUnderStrictSafety(t *testing.T) {
	for _, mode := range []alloc.CaptureMode{alloc.Global, alloc.ThreadLocal, alloc.Relaxed} {
		t.Run(mode.String(), func(t *testing.T) {
			_, a, s := hostAllocator(t, cpu.Options{Profile: cpu.ProfileGB10}, alloc.Options{})
			h, err := a.HostAlloc(4 << 20)
			require.NoError(t, err)
			p := first(h)
			require.NoError(t, h.Close())
			require.NoError(t, a.Synchronize())

			require.NoError(t, a.BeginCapture(mode))
			before := s.Snapshot()
			h2, err := a.HostAlloc(3 << 20) // the same class: 4 MiB
			require.NoError(t, err, "cached HostAlloc during a %s capture under strict safety", mode)
			require.Same(t, p, first(h2), "served from the cache")
			_, err = a.HostAlloc(64 << 20)
			requireStrictOrDocumented(t, err, mode)
			require.NoError(t, h2.Close(), "a cached buffer's Close during the capture")
			d := s.Snapshot().Sub(before)
			require.Zero(t, d[alloctest.MethodHostAlloc], "HostAlloc reached the driver during the capture")
			require.Zero(t, d[alloctest.MethodHostFree], "HostFree reached the driver during the capture")
			g, err := a.EndCapture()
			require.NoError(t, err)
			require.NoError(t, g.Close())
			st := a.Stats()
			require.EqualValues(t, 1, st.HostPins)
			require.EqualValues(t, 4<<20, st.HostCached)
			require.Zero(t, st.HostBytes)
		})
	}
}

func requireStrictOrDocumented(t *testing.T, err error, mode alloc.CaptureMode) {
	t.Helper()
	require.ErrorIs(t, err, alloc.ErrCaptureIncompatibleAllocation, "a pinning during a %s capture", mode)
}

// Freed host memory is reused only once the stream is known to be past
// the work queued before the free: during a capture (no query can ask),
// memory freed since the last Synchronize is not reused, so a HostAlloc
// pins afresh (allowed in a Relaxed capture on a documented device);
// after a Synchronize it reuses.
func TestHostCacheReuseWaitsForTheStream(t *testing.T) {
	_, a, _ := hostAllocator(t, cpu.Options{}, alloc.Options{})
	h, err := a.HostAlloc(1 << 20)
	require.NoError(t, err)
	p := first(h)
	dev, err := a.Alloc(1 << 20)
	require.NoError(t, err)
	require.NoError(t, a.UploadHost(dev, 0, h, 0, 1<<20))
	require.NoError(t, h.Close())
	require.NoError(t, a.BeginCapture(alloc.Relaxed))
	busy, err := a.HostAlloc(1 << 20)
	require.NoError(t, err)
	require.NotSame(t, p, first(busy), "memory reused while the stream may still copy from it")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.EqualValues(t, 2, a.Stats().HostPins)
	require.NoError(t, a.Synchronize())
	again, err := a.HostAlloc(1 << 20)
	require.NoError(t, err)
	require.Same(t, p, first(again), "memory not reused once the stream passed its free")
	require.NoError(t, busy.Close())
	require.NoError(t, again.Close())
	require.NoError(t, a.Free(dev))
}

// A capture's copies hold the host memory they use until the graph is
// closed, even when the buffer is closed meanwhile (replays read it).
func TestHostCacheHoldsMemoryForGraphs(t *testing.T) {
	_, a, _ := hostAllocator(t, cpu.Options{}, alloc.Options{})
	h, err := a.HostAlloc(8192)
	require.NoError(t, err)
	p := first(h)
	dev, err := a.Alloc(8192)
	require.NoError(t, err)
	require.NoError(t, a.BeginCapture(alloc.Global))
	require.NoError(t, a.UploadHost(dev, 0, h, 0, 8192))
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, h.Close())
	require.NoError(t, a.Synchronize())
	var others []*alloc.HostBuffer
	for range hostSlotsPerChunk(8192) - 1 { // the rest of h's chunk

		o, err := a.HostAlloc(8192)
		require.NoError(t, err)
		require.NotSame(t, p, first(o), "memory a live graph copies from was reused")
		others = append(others, o)
	}
	require.EqualValues(t, 1, a.Stats().HostPins)
	require.Zero(t, a.Stats().HostCached, "h's chunk is all handed out or held")
	require.NoError(t, g.Close())
	require.NoError(t, a.Synchronize())
	back, err := a.HostAlloc(8192)
	require.NoError(t, err)
	require.Same(t, p, first(back), "memory not reused after the graph was closed")
	for _, o := range append(others, back) {
		require.NoError(t, o.Close())
	}
	require.NoError(t, a.Free(dev))
}

// hostSlotsPerChunk is how many buffers of class size one carved chunk
// holds (2 MiB chunks): enough HostAllocs to empty the cache of a class.
func hostSlotsPerChunk(class int) int { return (2 << 20) / class }

// Trim unpins the cache's idle memory; host_cache=false pins at every
// HostAlloc and unpins at every Close, which strict safety then refuses
// during a capture.
func TestHostCacheTrimAndOff(t *testing.T) {
	d, a, _ := hostAllocator(t, cpu.Options{}, alloc.Options{})
	h, err := a.HostAlloc(100 << 10)
	require.NoError(t, err)
	require.NoError(t, h.Close())
	require.EqualValues(t, 2<<20, d.HostBytes(), "one chunk pinned")
	require.EqualValues(t, 2<<20, a.Stats().HostCached)
	require.NoError(t, a.Trim())
	require.Zero(t, d.HostBytes(), "Trim left cached host memory pinned")
	require.Zero(t, a.Stats().HostCached)

	_, off, s := hostAllocator(t, cpu.Options{Profile: cpu.ProfileGB10}, alloc.Options{NoHostCache: true})
	x, err := off.HostAlloc(4096)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	y, err := off.HostAlloc(4096)
	require.NoError(t, err)
	require.EqualValues(t, 2, s.Snapshot()[alloctest.MethodHostAlloc], "every HostAlloc pins with the cache off")
	require.NoError(t, off.BeginCapture(alloc.Relaxed))
	requireStrict(t, y.Close(), "HostBuffer.Close with the cache off")
	g, err := off.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, y.Close())
	require.Zero(t, off.Stats().HostCached)
}
