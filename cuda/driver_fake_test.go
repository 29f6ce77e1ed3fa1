package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// What both drivers do with every bound call is tested once, for both, in
// internal/gpurt (driver_fake_test.go there); here, what only CUDA does.

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
