package conformance

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Host memory (docs/host-memory.md): HostAlloc's pinned cache, host
// memory the engine already has registered (Host.Register) or mapped
// (Host.MapHost), and managed memory (Host.AllocManaged, Host.Prefetch),
// each with its capture rules. A plugin refuses registration and managed
// memory (the memory would have to be reached from the backend's process):
// there the rules assert that precise refusal instead.

// hostClass is a HostAlloc size whose class is pinned one buffer to a
// chunk (above 512 KiB): a freed buffer's memory is the only memory of
// its class the cache holds, so whether it was reused shows.
const hostClass = 1 << 20

// hostN is the size of the registered, mapped and managed regions.
const hostN = 64 << 10

func (s *suite) hostMemory(t *testing.T) {
	runRules(t,
		rule{"pinned_cache_reuses_without_driver_call", s.hostCacheReusesWithoutDriverCall},
		rule{"pinned_cache_reuse_waits_for_the_stream", s.hostCacheReuseWaitsForTheStream},
		rule{"pinned_cache_hit_in_capture_held_by_graph", inEachMode(s.hostCacheHitInCaptureHeldByGraph)},
		rule{"register_captured_copy_reads_later_writes", s.registeredCapturedCopyReadsLaterWrites},
		rule{"register_refused_where_unsafe_calls_are", inEachMode(s.registerRefusedWhereUnsafeCallsAre)},
		rule{"managed_refused_during_any_capture", inEachMode(s.managedRefusedDuringAnyCapture)},
		rule{"managed_prefetch_copies_see_the_data", s.managedPrefetchCopiesSeeTheData},
		rule{"map_host_zero_copy_or_registers", s.mapHostZeroCopyOrRegisters},
	)
}

// pluginRefusesHostMemory reports whether e's backend runs in another
// process (plugin mode), which refuses registration and managed memory:
// the engine's memory cannot be reached from the backend's process.
func pluginRefusesHostMemory(e *env) bool { return strings.HasPrefix(e.drv.Name(), "plugin:") }

// requireUnsupported asserts err is the typed refusal of a backend that
// cannot do what (errors.ErrUnsupported, as an *alloc.Error) with its
// reason, and that nothing was booked.
func requireUnsupported(t *testing.T, e *env, err error, reason string) {
	t.Helper()
	requireRefused(t, err, alloc.StateNone, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), reason, "the refusal says why")
	assert.Zero(t, e.a.Stats().HostBuffers, "a refused call booked a host buffer")
}

// The plugin's reasons (backends/plugin/host_register.go, backends/plugin/host_managed.go).
const (
	pluginNoRegister = "cannot be registered by the backend's process"
	pluginNoManaged  = "managed memory lives in the backend process's address space"
)

// first is the address of h's first byte: which memory the cache gave.
func first(h *alloc.HostBuffer) *byte { return unsafe.SliceData(h.Bytes()) }

// hostCacheReusesWithoutDriverCall: a freed HostBuffer's memory, once the
// stream is past it, serves the next HostAlloc of its class with no
// driver call, and its Close makes none either.
func (s *suite) hostCacheReusesWithoutDriverCall(t *testing.T) {
	e := s.env(t)
	h := mustHost(t, e.a, hostClass)
	p := first(h)
	require.NoError(t, h.Close())
	require.NoError(t, e.a.Synchronize())
	before := e.spy.Snapshot()
	again := mustHost(t, e.a, hostClass-4096) // the same class
	assert.Same(t, p, first(again), "the freed buffer's memory was not reused")
	require.NoError(t, again.Close())
	assertNoDriverCall(t, e.spy, before)
	st := e.a.Stats()
	assert.EqualValues(t, 1, st.HostPins, "pinnings made")
	assert.EqualValues(t, hostClass, st.HostCached, "bytes the cache keeps")
	assert.Zero(t, st.HostBuffers)
}

// hostCacheReuseWaitsForTheStream: memory freed while a copy queued before
// the free may still read it is not reused during a capture, where no
// query can ask the stream (the HostAlloc pins instead, which a Global
// capture refuses); after a Synchronize it is, in a capture too, with no
// driver call.
func (s *suite) hostCacheReuseWaitsForTheStream(t *testing.T) {
	e := s.env(t)
	h := mustHost(t, e.a, hostClass)
	p := first(h)
	dev := mustAlloc(t, e.a, hostClass)
	copy(h.Bytes(), pattern(hostClass, 3))
	require.NoError(t, e.a.UploadHost(dev, 0, h, 0, hostClass))
	require.NoError(t, h.Close())
	capture := func(check func()) {
		t.Helper()
		require.NoError(t, e.a.BeginCapture(alloc.Global))
		check()
		g, err := e.a.EndCapture()
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	capture(func() {
		before := e.spy.Snapshot()
		_, err := e.a.HostAlloc(hostClass)
		requireRefused(t, err, alloc.StateActive, alloc.ErrCaptureIncompatibleAllocation)
		assertNoDriverCall(t, e.spy, before)
	})
	require.NoError(t, e.a.Synchronize())
	capture(func() {
		before := e.spy.Snapshot()
		again := mustHost(t, e.a, hostClass)
		assert.Same(t, p, first(again), "memory the stream is past was not reused")
		require.NoError(t, again.Close(), "a cached buffer's Close during a capture")
		assertNoDriverCall(t, e.spy, before)
	})
	require.Equal(t, pattern(hostClass, 3), download(t, e.a, dev, 0, hostClass))
	require.NoError(t, e.a.Free(dev))
	assert.EqualValues(t, 1, e.a.Stats().HostPins)
}

// hostCacheHitInCaptureHeldByGraph: a HostAlloc the cache serves during a
// capture succeeds in every mode and under every capture safety, with no
// driver call; a captured copy from it reads its bytes at every replay,
// and its memory is held by the graph (not reused after its Close) until
// Graph.Close.
func (s *suite) hostCacheHitInCaptureHeldByGraph(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	warm := mustHost(t, e.a, hostClass)
	p := first(warm)
	require.NoError(t, warm.Close())
	require.NoError(t, e.a.Synchronize())
	dev := mustAlloc(t, e.a, hostClass)
	var h *alloc.HostBuffer
	var before alloctest.Counts
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
		before = e.spy.Snapshot()
		var err error
		if h, err = e.a.HostAlloc(hostClass); err != nil {
			return err
		}
		assertCalls(t, e.spy, before, alloctest.MethodHostAlloc, 0)
		return e.a.UploadHost(dev, 0, h, 0, hostClass)
	})
	require.NoError(t, err, "a cached HostAlloc during a %s capture", mode)
	require.False(t, g.Eager(), "the driver refused capture")
	require.Same(t, p, first(h), "served from the cache")
	for seed := range uint64(2) {
		copy(h.Bytes(), pattern(hostClass, 20+seed))
		launch(t, e.a, g)
		require.Equal(t, pattern(hostClass, 20+seed), download(t, e.a, dev, 0, hostClass), "the replay read the buffer's bytes at launch")
	}
	require.NoError(t, h.Close())
	require.NoError(t, e.a.Synchronize())
	other := mustHost(t, e.a, hostClass)
	assert.NotSame(t, p, first(other), "memory a live graph copies from was reused")
	require.NoError(t, other.Close())
	require.NoError(t, g.Close())
	require.NoError(t, e.a.Synchronize())
	var back []*alloc.HostBuffer // the class's two buffers: the graph's is one again
	for range 2 {
		back = append(back, mustHost(t, e.a, hostClass))
	}
	assert.True(t, first(back[0]) == p || first(back[1]) == p, "memory not reused after Graph.Close")
	for _, b := range back {
		require.NoError(t, b.Close())
	}
	require.NoError(t, e.a.Free(dev))
}

// registeredCapturedCopyReadsLaterWrites: registered memory is used by a
// captured copy like a pinned buffer, which reads the bytes written after
// the capture at every replay; Close unregisters it (the same memory can
// be registered again). A plugin refuses, with its reason.
func (s *suite) registeredCapturedCopyReadsLaterWrites(t *testing.T) {
	e := s.env(t)
	b := make([]byte, hostN)
	h, err := e.a.Host().Register(b)
	if pluginRefusesHostMemory(e) {
		requireUnsupported(t, e, err, pluginNoRegister)
		return
	}
	require.NoError(t, err)
	assert.Same(t, &b[0], first(h), "Bytes is the caller's memory")
	dev := mustAlloc(t, e.a, hostN)
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return e.a.UploadHost(dev, 0, h, 0, hostN)
	})
	require.NoError(t, err)
	for seed := range uint64(2) {
		copy(b, pattern(hostN, 30+seed)) // written after the capture
		launch(t, e.a, g)
		require.Equal(t, pattern(hostN, 30+seed), download(t, e.a, dev, 0, hostN), "the replay read the registered bytes at launch")
	}
	require.NoError(t, g.Close())
	before := e.spy.Snapshot()
	require.NoError(t, h.Close())
	assertCalls(t, e.spy, before, alloctest.MethodHostUnregister, 1)
	assert.Zero(t, h.DevicePtr(), "a closed buffer has no device address")
	again, err := e.a.Host().Register(b)
	require.NoError(t, err, "registering memory Close unregistered")
	require.NoError(t, again.Close())
	require.NoError(t, e.a.Free(dev))
}

// registerRefusedWhereUnsafeCallsAre: during the allocator's own capture,
// registration is refused before the driver where unsafe calls are (a
// Global or ThreadLocal capture; any capture under strict safety), and
// made in a Relaxed capture otherwise; the capture survives either way.
// A plugin refuses where the capture allows it, with its reason.
func (s *suite) registerRefusedWhereUnsafeCallsAre(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	b := make([]byte, hostN)
	refused := mode != alloc.Relaxed || strictSafety(e.a)
	var h *alloc.HostBuffer
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: mode}, func() error {
		before := e.spy.Snapshot()
		var err error
		h, err = e.a.Host().Register(b)
		switch {
		case refused:
			requireRefused(t, err, alloc.StateActive, alloc.ErrCaptureIncompatibleAllocation, driver.ErrCaptureIllegalOp)
			assertNoDriverCall(t, e.spy, before)
		case pluginRefusesHostMemory(e):
			requireRefused(t, err, alloc.StateActive, errors.ErrUnsupported)
			assert.Contains(t, err.Error(), pluginNoRegister)
		default:
			require.NoError(t, err, "registration in a Relaxed capture")
			assertCalls(t, e.spy, before, alloctest.MethodHostRegister, 1)
		}
		return nil
	})
	require.NoError(t, err, "the capture survives the registration or its refusal")
	require.NoError(t, g.Close())
	if h != nil {
		require.NoError(t, h.Close())
	}
}

// managedRefusedDuringAnyCapture: a managed allocation and a prefetch are
// refused before the driver during any capture, the allocator's own in
// every mode or another allocator's in its capture domain, whatever the
// capture safety (a managed allocation during a capture hangs GB10's
// driver; no device's table says a capture may record a prefetch).
func (s *suite) managedRefusedDuringAnyCapture(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	m, err := e.a.Host().AllocManaged(hostN)
	if pluginRefusesHostMemory(e) {
		requireUnsupported(t, e, err, pluginNoManaged)
	} else {
		require.NoError(t, err)
	}
	other := e.newAllocator(alloc.Options{})
	for _, capturer := range []*alloc.Allocator{e.a, other} {
		st := alloc.StateActive
		if capturer != e.a {
			st = alloc.StateNone
		}
		require.NoError(t, capturer.BeginCapture(mode))
		before := e.spy.Snapshot()
		_, err := e.a.Host().AllocManaged(hostN)
		requireRefused(t, err, st, alloc.ErrCaptureIncompatibleAllocation, driver.ErrCaptureIllegalOp)
		if m != nil {
			err = e.a.Host().Prefetch(m, alloc.OnDevice)
			requireRefused(t, err, st, alloc.ErrCaptureIncompatibleAllocation, driver.ErrCaptureIllegalOp)
		}
		assertNoDriverCall(t, e.spy, before)
		g, err := capturer.EndCapture()
		require.NoError(t, err, "the capture survives the refusals")
		require.NoError(t, g.Close())
	}
	if m != nil {
		require.NoError(t, m.Close())
	}
}

// managedPrefetchCopiesSeeTheData: outside captures, managed memory
// written through Bytes and prefetched to the device is what a copy
// reads, at every replay of a captured one too; a copy into it prefetched
// back to the host is what Bytes reads; Close frees it.
func (s *suite) managedPrefetchCopiesSeeTheData(t *testing.T) {
	e := s.env(t)
	m, err := e.a.Host().AllocManaged(hostN)
	if pluginRefusesHostMemory(e) {
		requireUnsupported(t, e, err, pluginNoManaged)
		return
	}
	require.NoError(t, err)
	assert.NotZero(t, m.DevicePtr(), "managed memory's device address")
	dev := mustAlloc(t, e.a, hostN)
	copy(m.Bytes(), pattern(hostN, 40))
	require.NoError(t, e.a.Host().Prefetch(m, alloc.OnDevice))
	require.NoError(t, e.a.UploadHost(dev, 0, m, 0, hostN))
	require.Equal(t, pattern(hostN, 40), download(t, e.a, dev, 0, hostN))
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return e.a.UploadHost(dev, 0, m, 0, hostN)
	})
	require.NoError(t, err)
	copy(m.Bytes(), pattern(hostN, 41)) // written after the capture
	launch(t, e.a, g)
	require.Equal(t, pattern(hostN, 41), download(t, e.a, dev, 0, hostN), "the replay read the managed bytes at launch")
	require.NoError(t, g.Close())
	upload(t, e.a, dev, 0, pattern(hostN, 42))
	require.NoError(t, e.a.DownloadHost(m, 0, dev, 0, hostN))
	require.NoError(t, e.a.Host().Prefetch(m, alloc.OnHost))
	require.NoError(t, e.a.Synchronize())
	require.Equal(t, pattern(hostN, 42), m.Bytes(), "a copy into managed memory, prefetched to the host")
	require.NoError(t, m.Close())
	c := e.spy.Snapshot()
	assert.EqualValues(t, 1, c[alloctest.MethodMallocManaged])
	assert.EqualValues(t, 2, c[alloctest.MethodPrefetchManaged])
	assert.EqualValues(t, 1, c[alloctest.MethodFreeManaged], "Close frees managed memory")
	require.NoError(t, e.a.Free(dev))
}

// mapHostZeroCopyOrRegisters: where the device reads pageable host memory
// in place, through the host's page tables (DeviceInfo.HostPageTables),
// MapHost gives b's own address with no driver call, during a capture
// too, and Close makes none; elsewhere, HMM's pageable access included,
// it registers b (a plugin refuses that, with its reason).
func (s *suite) mapHostZeroCopyOrRegisters(t *testing.T) {
	e := s.env(t)
	b := make([]byte, hostN)
	if !e.a.Info().ReadsHostInPlace() {
		before := e.spy.Snapshot()
		h, err := e.a.Host().MapHost(b)
		if pluginRefusesHostMemory(e) {
			requireUnsupported(t, e, err, pluginNoRegister)
			return
		}
		require.NoError(t, err)
		assertCalls(t, e.spy, before, alloctest.MethodHostRegister, 1)
		require.NoError(t, h.Close())
		assertCalls(t, e.spy, before, alloctest.MethodHostUnregister, 1)
		return
	}
	var h *alloc.HostBuffer
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		before := e.spy.Snapshot()
		var err error
		if h, err = e.a.Host().MapHost(b); err != nil {
			return err
		}
		assertNoDriverCall(t, e.spy, before)
		return nil
	})
	require.NoError(t, err, "MapHost during a capture on a device that reads through the host's page tables")
	require.NoError(t, g.Close())
	assert.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), h.DevicePtr(), "b's own address")
	before := e.spy.Snapshot()
	require.NoError(t, h.Close())
	assertNoDriverCall(t, e.spy, before)
	c := e.spy.Snapshot()
	assert.Zero(t, c[alloctest.MethodHostRegister]+c[alloctest.MethodHostUnregister], "MapHost registered on a device that reads through the host's page tables")
}
