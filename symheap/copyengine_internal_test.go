package symheap

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every rank takes the largest copy-engine threshold of the ranks whose
// collectives run, carried through the open's confirm round: the copy
// engines run only where every rank's device measured them faster.
func TestCopyEngineThresholdsAgreeAtOpen(t *testing.T) {
	devs := []rankDevice{
		{runs: true, id: "a", sms: 4, perSM: 1, copyMin: [copyOps]int64{1 << 20, NoCopyEngine}},
		{runs: true, id: "b", sms: 4, perSM: 1, copyMin: [copyOps]int64{64 << 20, 1 << 10}},
		{runs: false, copyMin: [copyOps]int64{NoCopyEngine, NoCopyEngine}},
	}
	for i, d := range devs {
		got, err := decodeRankDevice(d.encode())
		require.NoError(t, err)
		if d.runs {
			require.Equal(t, d.copyMin, got.copyMin, "rank %d's thresholds survive the round", i)
		}
		devs[i] = got
	}
	require.Equal(t, [copyOps]int64{64 << 20, NoCopyEngine}, agreeCopyEngine(devs))
	require.Equal(t, [copyOps]int64{NoCopyEngine, NoCopyEngine}, agreeCopyEngine(devs[2:]), "no rank runs")
	require.Equal(t, CopyEngine, resolveCopy(Auto, 64<<20, 64<<20))
	require.Equal(t, Kernel, resolveCopy(Auto, 64<<20-1, 64<<20))
	require.Equal(t, Kernel, resolveCopy(Auto, 1<<62, NoCopyEngine))
	require.Equal(t, CopyEngine, resolveCopy(CopyEngine, 0, NoCopyEngine), "a forced variant stays")
}
