package symheap_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/symheap"
)

func TestDeviceKind(t *testing.T) {
	for name, want := range map[string]string{
		"cuda:0 NVIDIA H200 (runtime 13.0, driver 13.0)": "NVIDIA H200",
		"hip:3 AMD Instinct MI300X (HIP runtime 6.1.0)":  "AMD Instinct MI300X",
		"cuda:1 Fake GPU 1 (runtime 12.4, driver 12.4)":  "Fake GPU 1",
		"cpu": "cpu",
	} {
		require.Equal(t, want, symheap.DeviceKind(name), name)
	}
	max, recorded := symheap.OneShotMaxFor("NVIDIA H200", 8)
	require.True(t, recorded)
	require.EqualValues(t, 256<<10, max)
	max, recorded = symheap.OneShotMaxFor("NVIDIA H200", 3)
	require.False(t, recorded, "an unrecorded rank count")
	require.EqualValues(t, symheap.OneShotMaxBytes, max)
	_, recorded = symheap.OneShotMaxFor("an unrecorded GPU", 2)
	require.False(t, recorded)
}

// Auto on the device heap follows the recorded crossover of its device
// kind and rank count: with a row that says one-shot up to 1 MiB for the
// fake device, a 512 KiB all-reduce runs one-shot (the fixed 256 KiB
// would have picked two-shot); without one, the fallback holds.
func TestFakeAutoFollowsRecordedCrossover(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		open := func() *topoWorld { return mustOpenTopo(t, v, 2) }
		run := func(w *topoWorld) string {
			w.must(t, func(r int) error {
				h := w.heaps[r]
				require.NoError(t, h.Reset())
				x, err := h.Alloc(512 << 10)
				if err != nil {
					return err
				}
				if err := h.AllReduce(x, symheap.Float32); err != nil {
					return err
				}
				return h.Synchronize()
			})
			return launched(t, v, log)
		}
		w := open()
		require.EqualValues(t, symheap.OneShotMaxBytes, symheap.OneShotMax(w.heaps[0]))
		require.Equal(t, "capalloc_allreduce_twoshot_aligned", run(w))

		kind := symheap.DeviceKind(w.heaps[0].Allocator().Driver().Info().Name)
		defer symheap.SetRecordedOneShotMax([]symheap.OneShotRow{{Kind: kind, Ranks: 2, MaxBytes: 1 << 20, Run: "test"}})()
		w = open()
		require.EqualValues(t, 1<<20, symheap.OneShotMax(w.heaps[0]))
		require.Equal(t, "capalloc_allreduce_oneshot_aligned", run(w))
	})
}
