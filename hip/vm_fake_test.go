package hip

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
)

// What both drivers do with virtual memory is tested once, for both, in
// internal/gpurt (vm_fake_test.go); here, what only HIP has: the
// properties struct's layout before 5.3, and a runtime without the calls.

// A 5.2 runtime takes the old hipMemAllocationProp (the fake reads the
// layout of the version it reports and refuses another with 1): memory
// maps, and a memset and a download across two chunks work.
func TestFakeVirtualMemoryOldPropLayout(t *testing.T) {
	fake52(t)
	d, err := New(Options{NoCapture: true})
	require.NoError(t, err)
	defer d.Close()
	const g = 2 << 20
	require.EqualValues(t, g, d.MapGranularity())
	base, err := d.ReserveAddress(2 * g)
	require.NoError(t, err)
	require.NoError(t, d.MapMemory(base, g))
	require.NoError(t, d.MapMemory(base+g, g))
	s, err := d.CreateStream()
	require.NoError(t, err)
	require.NoError(t, d.MemsetAsync(base+g-8, 9, 16, s))
	out := make([]byte, 16)
	require.NoError(t, d.CopyDtoH(out, base+g-8, s))
	require.Equal(t, bytes.Repeat([]byte{9}, 16), out)
}

// The layouts themselves: pinned (1) on the device (1, id) where each
// version's header puts them.
func TestAllocationPropLayouts(t *testing.T) {
	old := allocationProp(50221153, 3)
	require.Equal(t, []byte{1, 0, 0, 0, 3, 0, 0, 0}, old[4:12], "5.2: location at 4")
	require.Equal(t, []byte{1, 0, 0, 0}, old[16:20], "5.2: type at 16")
	cur := allocationProp(60100000, 3)
	require.Equal(t, []byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0}, cur[:16], "5.3+: type at 0, location at 8")
	require.Len(t, old, 32)
	require.Len(t, cur, 32)
}

// Without the hipMem* calls the driver offers no virtual memory and says
// what the library lacks; the rest works.
func TestFakeVirtualMemoryCallsMissing(t *testing.T) {
	fake.Lib(t, "-DFAKE_NO_VM_API")
	d, err := New(Options{})
	require.NoError(t, err)
	defer d.Close()
	require.Zero(t, d.MapGranularity())
	err = d.MapMemory(1<<40, 2<<20)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "lacks [hipMemGetAllocationGranularity hipMemAddressReserve")
	s, err := d.CreateStream()
	require.NoError(t, err)
	require.NoError(t, d.StreamSynchronize(s))
}
