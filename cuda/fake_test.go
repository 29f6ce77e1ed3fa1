package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The fake libcudart (testdata/fakecudart.c) is compiled with gcc by
// internal/gpurt/gpurttest and loaded through CAPALLOC_CUDA_LIB, so the
// purego marshalling of every bound call runs here without a GPU. The tests
// both drivers share run once per vendor in internal/gpurt
// (internal/gpurt/driver_fake_test.go for every bound call); here, the fake
// and what only CUDA does when a driver opens on it.

var fake = gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart", LibEnv: LibEnv}

// openFake opens a driver on a fresh build of the fake, closed at the end
// of the test, and returns it with the fake's call log (gpurttest.Open).
var openFake = gpurttest.Opener(&fake, New)

// The device's name comes from cudaGetDeviceProperties, under the
// spelling of the runtime's version (the fake is 12.4: _v2).
func TestFakeOpenNamesTheDevice(t *testing.T) {
	d, log := openFake(t, Options{})
	lines := log.Lines()
	require.Len(t, gpurttest.Find(lines, "cudaGetDeviceProperties_v2 device=0"), 1, "runtime 12.4 binds the _v2 spelling")
	require.Contains(t, d.Info().Name, "Fake GPU 0")
	require.Equal(t, Alignment, d.Info().Alignment)
}

func TestFakeNoPoolsIsUnavailable(t *testing.T) {
	fake.Lib(t)
	t.Setenv("FAKE_CUDA_NO_POOLS", "1")
	_, err := New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "cudaDevAttrMemoryPoolsSupported")
}
