package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// What both drivers do with virtual memory is tested once, for both, in
// internal/gpurt (vm_fake_test.go); here, what only CUDA does: the calls
// come from the driver API and act on the primary context.

// Every virtual memory call runs with the primary context current (the
// fake refuses them without one, 201), retained once for them and
// released at Close.
func TestFakeVirtualMemoryOnPrimaryContext(t *testing.T) {
	d, log := openFake(t, Options{})
	log.Lines()
	require.EqualValues(t, 2<<20, d.MapGranularity())
	base, err := d.ReserveAddress(2 << 20)
	require.NoError(t, err)
	require.NoError(t, d.MapMemory(base, 2<<20))
	lines := log.Lines()
	require.Len(t, gpurttest.Find(lines, "cuDevicePrimaryCtxRetain device=0"), 1)
	require.NotEmpty(t, gpurttest.Find(lines, "cuCtxSetCurrent"))
	require.NoError(t, d.UnmapMemory(base, 2<<20))
	require.NoError(t, d.ReleaseAddress(base, 2<<20))
	require.NoError(t, d.Close())
	require.Len(t, gpurttest.Find(log.Lines(), "cuDevicePrimaryCtxRelease_v2 device=0"), 1)
}

// A driver library without the cuMem* calls (older than CUDA 10.2) offers
// no virtual memory and says what it lacks; the context it retained to
// find out is released at once, and the rest of the driver works.
func TestFakeVirtualMemoryCallsMissing(t *testing.T) {
	path := fake.Lib(t, "-DFAKE_NO_VM_API")
	log := gpurttest.OpenLog(t, path)
	d, err := New(Options{})
	require.NoError(t, err)
	defer d.Close()
	require.Zero(t, d.MapGranularity())
	_, err = d.ReserveAddress(2 << 20)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "lacks [cuMemGetAllocationGranularity cuMemAddressReserve")
	lines := log.Lines()
	require.Len(t, gpurttest.Find(lines, "cuDevicePrimaryCtxRetain"), 1)
	require.Len(t, gpurttest.Find(lines, "cuDevicePrimaryCtxRelease_v2"), 1)
	s, err := d.CreateStream()
	require.NoError(t, err)
	require.NoError(t, d.StreamSynchronize(s))
}
