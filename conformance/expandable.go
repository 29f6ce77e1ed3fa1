package conformance

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// expandableGroups are the groups run again with expandable segments on
// (alloc.Options.ExpandableSegments): allocation, free, memset and copies,
// capture and replay, aliasing, failure cleanup, workspaces, concurrency,
// Close and leaks. The rest (the watchdog, the truth table's refusals,
// collectives, bad input, the probe) do not reach the pool's growth.
var expandableGroups = []string{
	"Eager", "CrossAllocator", "Replay", "Aliasing", "FailedCapture", "WithCapture",
	"Workspace", "Concurrency", "InFlight", "Close", "Leaks", "GraphPool", "Pressure",
}

// RunExpandable runs expandableGroups with every allocator the suite makes
// growing expandable segments, on a backend whose driver implements
// driver.VirtualMemory; on any other it skips, saying so.
func RunExpandable(t *testing.T, open Factory) {
	s := &suite{open: closing(open), expandable: true}
	if vm, ok := s.openDriver(t).(driver.VirtualMemory); !ok || vm.MapGranularity() <= 0 {
		t.Skip("the backend's driver has no virtual memory management (driver.VirtualMemory): no expandable segments")
	}
	t.Run("Ranges", s.expandableRanges)
	for _, g := range groups {
		if slices.Contains(expandableGroups, g.name) {
			t.Run(g.name, func(t *testing.T) { g.run(s, t) })
		}
	}
}

// expandableRanges checks that the groups above do run on expandable
// ranges: a buffer comes from mapped chunks, holds data across a chunk
// boundary, and Trim and Close give the chunks back to the driver.
func (s *suite) expandableRanges(t *testing.T) {
	e := s.env(t)
	base, counted := liveBytes(e.drv)
	start := e.spy.Snapshot()
	before := start
	const n = 3 << 20 // more than one chunk of 2 MiB, CUDA's and cpu's granularity
	b := mustAlloc(t, e.a, n)
	d := e.spy.Snapshot().Sub(before)
	require.Positive(t, d[alloctest.MethodMapMemory], "the allocation mapped no chunk: %s", d)
	require.Zero(t, d[alloctest.MethodMallocAsync], "the allocation made an ordinary segment: %s", d)
	snap, err := e.a.Snapshot()
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(snap.Segments, func(sg memmap.Segment) bool {
		return sg.Expandable && sg.Ptr <= b.Ptr() && b.Ptr() < sg.Ptr+driver.DevicePtr(sg.Span)
	}), "the buffer is in no expandable range: %+v", snap.Segments)
	data := pattern(n, 9)
	upload(t, e.a, b, 0, data)
	require.Equal(t, data, download(t, e.a, b, 0, n), "bytes across the chunk boundary")
	require.NoError(t, e.a.Free(b))
	before = e.spy.Snapshot()
	require.NoError(t, e.a.Trim())
	assert.Positive(t, e.spy.Snapshot().Sub(before)[alloctest.MethodUnmapMemory], "Trim unmapped nothing")
	assert.Zero(t, e.a.Stats().BytesReserved)
	if n, ok := liveBytes(e.drv); counted && ok {
		assert.Equal(t, base, n, "device bytes after Trim")
	}
	require.NoError(t, e.close(e.a))
	d = e.spy.Snapshot().Sub(start)
	assert.Positive(t, d[alloctest.MethodReserveAddress])
	assert.Equal(t, d[alloctest.MethodReserveAddress], d[alloctest.MethodReleaseAddress], "Close released every range")
}
