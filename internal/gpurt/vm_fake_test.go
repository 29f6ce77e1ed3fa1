package gpurt_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Virtual memory over the fakes (internal/fakegpu/core.c enforces CUDA's
// rules: granularity multiples, whole mappings, access set before use;
// cuda's front also needs the primary context current).

const fakeGran = 2 << 20 // the fakes' default granularity

// vmCall is the vendor's name of a virtual memory call ("Map" -> "cuMemMap",
// "hipMemMap").
func (v *vendorCase) vmCall(name string) string {
	return map[string]string{"cuda": "cuMem", "hip": "hipMem"}[v.name] + name
}

// vmLines are the virtual memory calls in lines.
func (v *vendorCase) vmLines(lines []string) []string {
	var out []string
	for _, call := range []string{"GetAllocationGranularity", "AddressReserve", "AddressFree", "Create", "Release", "Map ", "Unmap", "SetAccess"} {
		out = append(out, find(lines, v.vmCall(call))...)
	}
	return out
}

// openVM opens a driver on a fresh build of v's fake (openFake) and
// returns it as its driver.VirtualMemory too, at the fakes' granularity.
func openVM(t *testing.T, v *vendorCase) (gpuDriver, driver.VirtualMemory, *fakeLog) {
	t.Helper()
	d, log := openFake(t, v, opts{})
	vm, ok := d.(driver.VirtualMemory)
	require.True(t, ok, "the driver implements driver.VirtualMemory")
	require.EqualValues(t, fakeGran, vm.MapGranularity())
	return d, vm, log
}

// reserve reserves chunks granules of address space.
func reserve(t *testing.T, vm driver.VirtualMemory, chunks int, msgAndArgs ...any) driver.DevicePtr {
	t.Helper()
	base, err := vm.ReserveAddress(int64(chunks) * fakeGran)
	require.NoError(t, err, msgAndArgs...)
	return base
}

// Two chunks mapped by separate calls read and write as one range:
// memset, uploads, device-to-device copies and downloads across their
// boundary. Each map is create, map at offset 0, set access read-write for
// the driver's device; each unmap releases its handle.
func TestFakeVirtualMemoryAcrossChunks(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, vm, log := openVM(t, v)
		base := reserve(t, vm, 4)
		require.Zero(t, uint64(base)%fakeGran, "the reservation is aligned to the granularity")
		log.Lines()
		require.NoError(t, vm.MapMemory(base, fakeGran))
		lines := log.Lines()
		require.Len(t, find(lines, v.vmCall("Create"), fmt.Sprintf("size=%d flags=0", fakeGran)), 1)
		require.Len(t, find(lines, v.vmCall("Map"), fmt.Sprintf("size=%d offset=0", fakeGran), "flags=0"), 1)
		require.Len(t, find(lines, v.vmCall("SetAccess"), "location=1:0 flags=3 count=1"), 1, "read-write for device 0")
		require.NoError(t, vm.MapMemory(base+fakeGran, fakeGran))

		s := newStream(t, d)
		const n = 1 << 16
		at := base + fakeGran - n/2
		require.NoError(t, d.MemsetAsync(at, 0x5a, n, s))
		require.NoError(t, d.StreamSynchronize(s))
		require.Equal(t, bytes.Repeat([]byte{0x5a}, n), read(t, d, at, n))

		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		fill(t, d, at, want)
		q, err := d.MallocAsync(n, s)
		require.NoError(t, err)
		require.NoError(t, d.CopyDtoDAsync(q, at, n, s))
		require.NoError(t, d.CopyDtoDAsync(at+n, q, n, s))
		require.NoError(t, d.StreamSynchronize(s))
		require.Equal(t, append(append([]byte{}, want...), want...), read(t, d, at, 2*n))
		require.NoError(t, d.FreeAsync(q, s))

		log.Lines()
		require.NoError(t, vm.UnmapMemory(base+fakeGran, fakeGran))
		lines = log.Lines()
		require.Len(t, find(lines, v.vmCall("Unmap"), fmt.Sprintf("size=%d", fakeGran)), 1)
		require.Len(t, find(lines, v.vmCall("Release")), 1)
		// The fake reports what a GPU would fault on: an illegal address.
		err = d.MemsetAsync(at, 1, n, s)
		require.ErrorIs(t, err, driver.ErrDriver)
		require.Contains(t, err.Error(), "700")
		require.NoError(t, vm.UnmapMemory(base, fakeGran))
		require.NoError(t, vm.ReleaseAddress(base, 4*fakeGran))
		require.NoError(t, d.StreamSynchronize(s))
	})
}

// Bad input is ErrInvalidValue, refused before any virtual memory call,
// and changes nothing.
func TestFakeVirtualMemoryBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, vm, log := openVM(t, v)
		base := reserve(t, vm, 8)
		require.NoError(t, vm.MapMemory(base, fakeGran))
		two := base + 2*fakeGran
		require.NoError(t, vm.MapMemory(two, 2*fakeGran))
		fill(t, d, two, bytes.Repeat([]byte{4}, 2*fakeGran))
		m, err := d.Malloc(fakeGran)
		require.NoError(t, err)
		log.Lines()

		cases := alloctest.VMBadInput(vm, base, m, fakeGran)
		cases["release: size zero, wrong size"] = vm.ReleaseAddress(base, 0)
		for name, err := range cases {
			require.ErrorIs(t, err, alloc.ErrInvalidValue, name)
		}
		require.Empty(t, v.vmLines(log.Lines()), "every refusal before a runtime call")
		require.Equal(t, bytes.Repeat([]byte{4}, 2*fakeGran), read(t, d, two, 2*fakeGran), "the mapping is intact")
		require.NoError(t, vm.UnmapMemory(two, 2*fakeGran))
		require.NoError(t, vm.UnmapMemory(base, fakeGran))
		require.NoError(t, vm.ReleaseAddress(base, 8*fakeGran))
		require.ErrorIs(t, vm.ReleaseAddress(base, 8*fakeGran), alloc.ErrInvalidValue, "released twice")
		require.NoError(t, d.Free(m))
	})
}

// Out of device memory is ErrOutOfMemory with nothing mapped; a failure
// part way through a map (the map call, the access call) undoes what was
// done, so a retry works and nothing leaks.
func TestFakeVirtualMemoryFailuresUndo(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"MEM", fmt.Sprint(3*fakeGran))
		d, vm, log := openVM(t, v)
		base := reserve(t, vm, 8, "reserving more than the device has")
		require.NoError(t, vm.MapMemory(base, 2*fakeGran))
		log.Lines()
		err := vm.MapMemory(base+2*fakeGran, 2*fakeGran)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
		require.Empty(t, find(log.Lines(), v.vmCall("Map ")), "nothing mapped")

		for _, call := range []string{"Map", "SetAccess"} {
			v.fail(t, v.vmCall(call)+":2")
			require.ErrorIs(t, vm.MapMemory(base+2*fakeGran, fakeGran), alloc.ErrOutOfMemory, call)
			lines := log.Lines()
			require.Len(t, find(lines, v.vmCall("Release")), 1, "the handle of a failed %s is released", call)
			if call == "SetAccess" {
				require.Len(t, find(lines, v.vmCall("Unmap")), 1, "a mapping without access is unmapped")
			}
			v.fail(t, "")
		}
		require.NoError(t, vm.MapMemory(base+2*fakeGran, fakeGran), "the failed maps left the range and the memory free")
		fill(t, d, base+2*fakeGran, []byte{1, 2, 3})
		require.Equal(t, []byte{1, 2, 3}, read(t, d, base+2*fakeGran, 3))
	})
}

// Close unmaps and releases what is still mapped, frees the reservations
// and (cuda) releases the primary context it retained.
func TestFakeVirtualMemoryCloseReleases(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, vm, log := openVM(t, v)
		base := reserve(t, vm, 4)
		require.NoError(t, vm.MapMemory(base, fakeGran))
		require.NoError(t, vm.MapMemory(base+fakeGran, 2*fakeGran))
		log.Lines()
		require.NoError(t, d.Close())
		require.NoError(t, d.WaitClosed(context.Background()))
		lines := log.Lines()
		require.Len(t, find(lines, v.vmCall("Unmap")), 2)
		require.Len(t, find(lines, v.vmCall("Release")), 2)
		require.Len(t, find(lines, v.vmCall("AddressFree"), fmt.Sprintf("size=%d", 4*fakeGran)), 1)
		if v.name == "cuda" {
			require.Len(t, find(lines, "cuDevicePrimaryCtxRelease_v2"), 1, "the context virtual memory retained")
		}
		require.EqualValues(t, fakeGran, vm.MapGranularity(), "known since before Close")
		require.ErrorIs(t, vm.MapMemory(base, fakeGran), alloc.ErrClosed)
		_, err := vm.ReserveAddress(fakeGran)
		require.ErrorIs(t, err, alloc.ErrClosed)
	})
}

// A device that refuses the granularity query (801, not supported) gets
// no virtual memory: granularity 0, and the calls say why, unavailable;
// the rest of the driver works.
func TestFakeVirtualMemoryUnsupported(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		t.Setenv(v.envPrefix+"NO_VM", "1")
		d, log := openFake(t, v, opts{})
		vm, ok := d.(driver.VirtualMemory)
		require.True(t, ok)
		require.Zero(t, vm.MapGranularity())
		_, err := vm.ReserveAddress(fakeGran)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), v.vmCall("GetAllocationGranularity"))
		require.Len(t, v.vmLines(log.Lines()), 1, "asked once, not again")
		s := newStream(t, d)
		p, err := d.MallocAsync(256, s)
		require.NoError(t, err)
		require.NoError(t, d.FreeAsync(p, s))
		require.NoError(t, d.StreamSynchronize(s))
	})
}
