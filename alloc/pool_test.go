package alloc_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// When the driver runs out of memory while the pool caches freed blocks of
// other sizes, the allocator gives the cache back and retries, so cached
// memory never causes an out-of-memory an engine could not recover from.
func TestOutOfMemoryReleasesCacheAndRetries(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<20)
	cacheFreed(t, a, slices.Repeat([]int64{64 << 10}, 12)...) // 768 KiB of the 1 MiB device
	require.Equal(t, int64(12<<10)*64, a.Stats().BytesCached, "freed blocks stay cached")

	big, err := a.Alloc(512 << 10) // fits only once the cache is returned
	require.NoError(t, err)
	st := a.Stats()
	require.Zero(t, st.BytesCached, "the cache was given back to the driver")
	require.Equal(t, int64(512<<10), st.BytesInUse)

	_, err = a.Alloc(768 << 10) // does not fit even with an empty cache
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Contains(t, err.Error(), "512.00 KiB in use", "the error carries the stats")
	require.Equal(t, st.BytesInUse, a.Stats().BytesInUse, "a failed Alloc changes nothing")

	require.NoError(t, a.Free(big))
	require.NoError(t, a.Close())
}

// Under memory pressure the pool gives back only as many wholly free
// segments as make room: the smallest one that is large enough, or else
// the largest ones until their sizes cover the new segment. The rest stay
// cached for the engine's next step. (The cases keep the cache within the
// growth's own slack, segmentSlack times the peak in use: a live
// ballast raises the peak, so the growth gives nothing back first.)
func TestOutOfMemoryReleasesOnlyWhatIsNeeded(t *testing.T) {
	const MiB = 1 << 20
	for _, tc := range []struct {
		name        string
		limit       int64
		ballast     int64   // a buffer live throughout, allocated with the cached ones
		cached      []int64 // buffers allocated then freed: one segment each
		next        int64   // the allocation that runs out of memory
		stillCached int64
		frees       uint64
	}{
		// 20 MiB needed, no free segment that large: 16+14 cover it.
		{"largest_first", 124 * MiB, 60 * MiB, []int64{10 * MiB, 12 * MiB, 14 * MiB, 16 * MiB}, 20 * MiB, 22 * MiB, 2},
		// A small request needs a 2 MiB segment: the smallest free
		// segment of at least 2 MiB goes, the larger one stays (and the new
		// segment's unused rest is cached too).
		{"smallest_fit", 35 * MiB, 0, []int64{12 * MiB, 22 * MiB}, 4 << 10, 22*MiB + 2*MiB - 4<<10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := newCPUAllocator(t, tc.limit)
			var ballast alloc.Buffer
			if tc.ballast > 0 {
				var err error
				ballast, err = a.Alloc(tc.ballast)
				require.NoError(t, err)
			}
			cacheFreed(t, a, tc.cached...)
			before := a.Stats()
			b, err := a.Alloc(tc.next)
			require.NoError(t, err)
			st := a.Stats()
			require.Equal(t, tc.stillCached, st.BytesCached, "what the retry did not need stays cached")
			require.Equal(t, tc.frees, st.DriverFrees-before.DriverFrees)
			require.NoError(t, a.Free(b))
			if tc.ballast > 0 {
				require.NoError(t, a.Free(ballast))
			}
			require.NoError(t, a.Close())
		})
	}
}

// Blocks are carved out of segments and merged again when freed: whatever
// the order of frees, once every buffer is freed each segment is one free
// block again, so Trim gives every byte back. Live buffers never overlap.
func TestPoolSplitsAndMergesBlocks(t *testing.T) {
	_, a := newCPUAllocator(t, 1<<30)
	tr := newPoolTrace(4000, 64, 256, 16<<20, 7)
	live := make([]alloc.Buffer, tr.slots)
	for i, op := range tr.ops {
		if op.size == 0 {
			require.NoError(t, a.Free(live[op.slot]), "op %d", i)
			live[op.slot] = alloc.Buffer{}
			continue
		}
		b, err := a.Alloc(op.size)
		require.NoError(t, err, "op %d", i)
		require.Zero(t, uint64(b.Ptr())%uint64(a.Info().Alignment), "aligned")
		for j, o := range live {
			if o.Size() > 0 && overlap(b.Ptr(), b.Size(), o.Ptr(), o.Size()) {
				t.Fatalf("op %d: new buffer [%#x,+%d) overlaps live slot %d [%#x,+%d)", i, b.Ptr(), b.Size(), j, o.Ptr(), o.Size())
			}
		}
		live[op.slot] = b
	}
	st := a.Stats()
	require.Less(t, st.DriverAllocs, uint64(len(tr.ops)/20), "most allocations are served from segments: %s", st)
	for _, b := range live {
		if b.Size() > 0 {
			require.NoError(t, a.Free(b))
		}
	}
	st = a.Stats()
	require.Equal(t, st.BytesReserved, st.BytesCached, "everything freed is cached")
	require.NoError(t, a.Trim())
	st = a.Stats()
	require.Zero(t, st.BytesReserved, "every segment merged back whole and was given back: %s", st)
	require.Equal(t, st.DriverAllocs, st.DriverFrees)
	require.NoError(t, a.Close())
}

// On the fragmentation trace of issue 12 (sizes log-uniform from 256 B to
// 64 MiB, about 64 live) the memory reserved at the peak stays within 1.6x
// of the bytes in use at the peak. Size-class caching reserved 5x.
func TestPoolFragmentationOnTrace(t *testing.T) {
	_, a := newCPUAllocator(t, 8<<30)
	tr := newPoolTrace(100000, 64, 256, 64<<20, 1) // the benchmark's trace
	live := make([]alloc.Buffer, tr.slots)
	require.NoError(t, tr.run(a, live))
	st := a.Stats()
	require.Zero(t, st.BytesInUse, "the trace frees everything it allocated")
	ratio := float64(st.PeakReserved) / float64(st.PeakInUse)
	t.Logf("peak reserved %d MiB / peak in use %d MiB = %.2fx", st.PeakReserved>>20, st.PeakInUse>>20, ratio)
	require.LessOrEqual(t, ratio, 1.6)
	require.NoError(t, a.Close())
}
