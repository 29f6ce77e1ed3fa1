package hip

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The fake libamdhip64 (testdata/fakehip.c) is compiled with gcc by
// internal/gpurt/gpurttest and loaded through CAPALLOC_HIP_LIB, so the
// purego marshalling of every bound call runs here without a GPU. The tests
// both drivers share run once per vendor in internal/gpurt
// (internal/gpurt/driver_fake_test.go for every bound call); here, the fake
// and what only HIP does when a driver opens on it.

var fake = gpurttest.Fake{Src: "hip/testdata/fakehip.c", Name: "libamdhip64", LibEnv: LibEnv}

// openFake opens a driver on a fresh build of the fake, closed at the end
// of the test, and returns it with the fake's call log (gpurttest.Open).
var openFake = gpurttest.Opener(&fake, New)

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
