package hip

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hipMemGetInfo failing at open is not fatal: the total comes from
// hipDeviceTotalMem and a warning says so.
func TestFakeMemGetInfoFailureFallsBack(t *testing.T) {
	t.Setenv("FAKE_HIP_FAIL", "hipMemGetInfo:999")
	t.Setenv("FAKE_HIP_MEM", "3221225472")
	d, _ := openFake(t, Options{})
	require.Equal(t, int64(3<<30), d.Info().TotalMemory)
	w := strings.Join(d.Warnings(), "\n")
	require.Contains(t, w, "total memory from hipDeviceTotalMem")
	require.Contains(t, w, "hipMemGetInfo: unknown (hipErrorUnknown, 999)")
}

// On a unified-memory device an under-reporting hipMemGetInfo is
// overridden by hipDeviceTotalMem; on a discrete one hipMemGetInfo stands.
func TestFakeMemGetInfoUnderReport(t *testing.T) {
	t.Setenv("FAKE_HIP_MEMINFO_TOTAL", "268435456")
	t.Setenv("FAKE_HIP_INTEGRATED", "1")
	d, _ := openFake(t, Options{})
	require.True(t, d.Info().UnifiedMemory)
	require.Equal(t, int64(1<<30), d.Info().TotalMemory)
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "under-reports unified memory (268435456 B)")

	t.Setenv("FAKE_HIP_INTEGRATED", "0")
	d, _ = openFake(t, Options{})
	require.Equal(t, int64(256<<20), d.Info().TotalMemory)
	require.NotContains(t, strings.Join(d.Warnings(), "\n"), "total memory")
}
