package cuda

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// cudaMemGetInfo failing at open is not fatal: the total comes from
// cudaDeviceProp.totalGlobalMem (read at offset 288) and a warning says so.
func TestFakeMemGetInfoFailureFallsBack(t *testing.T) {
	t.Setenv("FAKE_CUDA_FAIL", "cudaMemGetInfo:999")
	t.Setenv("FAKE_CUDA_PROP_MEM", "3221225472")
	d, _ := openFake(t, Options{})
	require.Equal(t, int64(3<<30), d.Info().TotalMemory)
	w := strings.Join(d.Warnings(), "\n")
	require.Contains(t, w, "cudaDeviceProp.totalGlobalMem")
	require.Contains(t, w, "cudaMemGetInfo returned 999")
}

// On a unified-memory device an under-reporting cudaMemGetInfo is
// overridden by totalGlobalMem; on a discrete one cudaMemGetInfo stands.
func TestFakeMemGetInfoUnderReport(t *testing.T) {
	t.Setenv("FAKE_CUDA_MEMINFO_TOTAL", "268435456")
	t.Setenv("FAKE_CUDA_INTEGRATED", "1")
	d, _ := openFake(t, Options{})
	require.True(t, d.Info().UnifiedMemory)
	require.Equal(t, int64(1<<30), d.Info().TotalMemory)
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "under-reports unified memory (268435456 B)")

	t.Setenv("FAKE_CUDA_INTEGRATED", "0")
	d, _ = openFake(t, Options{})
	require.Equal(t, int64(256<<20), d.Info().TotalMemory)
	require.Empty(t, d.Warnings())
}
