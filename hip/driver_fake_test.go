package hip

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// What both drivers do with every bound call is tested once, for both, in
// internal/gpurt (driver_fake_test.go there); here, what only HIP does.

// The device's name comes from hipDeviceGetName, and the loader probes for
// a device once per library.
func TestFakeOpenNamesTheDevice(t *testing.T) {
	d, log := openFake(t, Options{})
	lines := log.Lines()
	require.Len(t, gpurttest.Find(lines, "hipDeviceGetName len=256 device=0"), 1, "the name comes from hipDeviceGetName, not hipGetDeviceProperties")
	require.Len(t, gpurttest.Find(lines, "hipGetDeviceCount"), 1, "the loader probes for a device once")
	d2, err := New(Options{})
	require.NoError(t, err)
	require.NoError(t, d2.Close())
	require.Empty(t, gpurttest.Find(log.Lines(), "hipGetDeviceCount"), "a second open of the loaded library does not probe again")
	require.Contains(t, d.Info().Name, "Fake AMD GPU 0")
	require.Contains(t, d.Info().Name, "HIP runtime 6.1.0")
	require.Equal(t, Alignment, d.Info().Alignment)
}

// hipDeviceAttributeMemoryPoolsSupported (88 in hip_runtime_api.h, not
// CUDA's 115) reads 0 by default on ROCm 5.6 to 6.1 although pools work:
// the driver warns and opens. Where it reads 1, no warning.
func TestFakePoolsAttributeDoesNotRefuse(t *testing.T) {
	d, log := openFake(t, Options{})
	require.Len(t, gpurttest.Find(log.Lines(), "hipDeviceGetAttribute attr=88 device=0"), 1)
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "hipDeviceAttributeMemoryPoolsSupported = 0")

	t.Setenv("FAKE_HIP_POOLS_ATTR", "1")
	d, _ = openFake(t, Options{})
	require.NotContains(t, strings.Join(d.Warnings(), "\n"), "MemoryPoolsSupported")
}
