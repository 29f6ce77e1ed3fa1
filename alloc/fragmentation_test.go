package alloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// Peak reserved stays within 1.30x the peak in use with plain segments
// and 1.05x with expandable ones on every fragmentation trace, below the
// PyTorch model's on each, and on the pattern of pytorch/pytorch#123548
// reserved stops growing. Plain: a growth first gives back wholly free
// segments past segmentSlack times the peak in use, least recently used
// first. Expandable (over the fake VirtualMemory, whose chunks are CUDA's
// 2 MiB): the slack policy unmaps free chunks, and a block touches as few
// chunks as it can (expandable.go). The expandable runs check the pool
// every 97 ops and play the trace twice, the driver's mappings matching
// the counters after. BENCHMARKS.md, "Fragmentation against PyTorch".
func TestFragmentationOnTraces(t *testing.T) {
	for _, tc := range fragmentationTraces() {
		var m torchModel
		m.runChecked(tc.tr, func(int) {})
		model := float64(m.peakReserved) / float64(m.peakIn)
		for _, impl := range []struct {
			name  string
			bound float64
		}{{"plain", 1.30}, {"expandable", 1.05}} {
			t.Run(tc.name+"/"+impl.name, func(t *testing.T) {
				var a *alloc.Allocator
				var vm *vmDriver
				if impl.name == "expandable" {
					vm = newVMDriver(t, 0)
					a = newExpandable(t, vm)
				} else {
					_, a = newCPUAllocator(t, 64<<30)
				}
				defer a.Close()
				var mid int64
				live := make([]alloc.Buffer, tc.tr.slots)
				require.NoError(t, tc.tr.runChecked(a, live, func(i int) error {
					if i == halfOps(tc.tr) {
						mid = a.Stats().PeakReserved
					}
					if vm != nil && i%97 == 0 {
						return a.CheckPool()
					}
					return nil
				}))
				st := a.Stats()
				ratio := float64(st.PeakReserved) / float64(st.PeakInUse)
				t.Logf("peak reserved / peak in use %.3fx; the PyTorch model's %.3fx", ratio, model)
				require.LessOrEqual(t, ratio, impl.bound)
				require.Less(t, ratio, model)
				if tc.name == "fenced" {
					grown := st.PeakReserved - mid
					require.LessOrEqual(t, grown, int64(4<<20), "reserved grew %d B over the second half of the cycles", grown)
				}
				if vm != nil {
					require.NoError(t, tc.tr.runChecked(a, live, nil))
					agrees(t, a, vm)
					closeClean(t, a, vm)
				}
			})
		}
	}
}

// A growth gives back the wholly free segments that would take reserved
// past segmentSlack (1.2) times the peak in use, least recently used
// first, and keeps the others cached.
func TestGrowthGivesBackOldestPastTheSlack(t *testing.T) {
	const MiB = 1 << 20
	_, a := newCPUAllocator(t, 1<<30)
	defer a.Close()
	ballast, err := a.Alloc(100 * MiB)
	require.NoError(t, err)
	old, err := a.Alloc(40 * MiB)
	require.NoError(t, err)
	recent, err := a.Alloc(60 * MiB)
	require.NoError(t, err)
	require.NoError(t, a.Free(old)) // peak in use 200 MiB: 240 MiB of slack
	require.NoError(t, a.Free(recent))
	// No cached block holds 70 MiB: a new segment of 70 would make
	// reserved 270 MiB, 30 past the slack, and the least recently used
	// segment (40 MiB) covers that alone.
	b, err := a.Alloc(70 * MiB)
	require.NoError(t, err)
	st := a.Stats()
	require.EqualValues(t, (100+60+70)*MiB, st.BytesReserved, "not just the least recently used segment was given back")
	require.EqualValues(t, 1, st.DriverFrees)
	require.NoError(t, a.Free(b))
	require.NoError(t, a.Free(ballast))
}
