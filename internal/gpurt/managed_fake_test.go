package gpurt_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/kernels"
)

// Managed memory over each fake: allocated with the global attach flag,
// written through its host view, prefetched to the device and back on a
// stream (the device ordinal, then the CPU's id, -1), read in place by a
// kernel; HostFree refuses it, FreeManaged frees it once, and a prefetch
// outside it is refused before the runtime.
func TestFakeManagedMemory(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		d, m, log := kernelDriver(t, v, opts{})
		mm := d.(driver.ManagedMemory)
		const n = 32
		p, b, err := mm.MallocManaged(4 * n)
		require.NoError(t, err)
		require.Len(t, b, 4*n)
		require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), p, "one address for host and device")
		require.Len(t, find(log.Lines(), v.prefix+"MallocManaged", "n=128", "flags=1"), 1)
		xs, ys := axpyInputs(n, 1)
		copy(b, floatBytes(xs))
		y, err := d.Malloc(4 * n)
		require.NoError(t, err)
		fill(t, d, y, floatBytes(ys))
		s := newStream(t, d)
		log.Lines()
		require.NoError(t, mm.PrefetchManaged(p, 4*n, false, s))
		require.Len(t, find(log.Lines(), v.prefix+"MemPrefetchAsync", "n=128", "device=0"), 1)
		args := (&kernels.AxpyArgs{X: uint64(p), Y: uint64(y), N: n, A: 2.5}).Encode(make([]byte, kernels.AxpySize))
		within(t, time.Minute, func() { err = d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 8, args, s) })
		require.NoError(t, err, "a kernel reads managed memory")
		require.NoError(t, mm.PrefetchManaged(p, 4*n, true, s))
		require.Len(t, find(log.Lines(), v.prefix+"MemPrefetchAsync", "device=-1"), 1, "the host is the CPU's id")
		require.NoError(t, d.StreamSynchronize(s))
		require.Equal(t, axpyWant(xs, ys), bytesFloats(read(t, d, y, 4*n)))

		require.ErrorIs(t, d.HostFree(b), driver.ErrInvalidValue, "HostFree of managed memory")
		require.ErrorIs(t, mm.PrefetchManaged(y, 4, false, s), driver.ErrInvalidValue, "device memory is not managed")
		require.ErrorIs(t, mm.PrefetchManaged(p, 4*n+1, false, s), driver.ErrInvalidValue, "past the end")
		require.Empty(t, find(log.Lines(), "MemPrefetchAsync"), "refused before the runtime")
		require.NoError(t, mm.FreeManaged(p))
		require.ErrorIs(t, mm.FreeManaged(p), driver.ErrInvalidValue)
	})
}

// CUDA 13's cudaMemPrefetchAsync takes a cudaMemLocation by value and
// flags: the driver binds it so for a 13.x runtime, and the fake (which
// reads its arguments as its reported version's ABI) sees device 0 as
// location {1, 0} and the host as {2, 0}, flags 0.
func TestFakeManagedPrefetchCUDA13(t *testing.T) {
	v := &vendors[0]
	t.Setenv("FAKE_CUDART_VERSION", "13000")
	t.Setenv("FAKE_CUDA_DRIVER_VERSION", "13000")
	d, log := openFake(t, v, opts{})
	mm := d.(driver.ManagedMemory)
	p, _, err := mm.MallocManaged(4096)
	require.NoError(t, err)
	s := newStream(t, d)
	log.Lines()
	require.NoError(t, mm.PrefetchManaged(p, 4096, false, s))
	require.NoError(t, mm.PrefetchManaged(p, 4096, true, s))
	lines := log.Lines()
	require.Len(t, find(lines, "cudaMemPrefetchAsync", "location=1:0 flags=0"), 1, "%v", lines)
	require.Len(t, find(lines, "cudaMemPrefetchAsync", "location=2:0 flags=0"), 1, "%v", lines)
	require.NoError(t, d.StreamSynchronize(s))
	require.NoError(t, mm.FreeManaged(p))
}

// A location passed by value is one register: type in the low 32 bits, id
// in the high, neither's sign spilling into the other's half.
func TestMemLocationArg(t *testing.T) {
	require.Equal(t, uint64(1|3<<32), uint64(gpurt.MemLocationArg(gpurt.MemLocationTypeDevice, 3)))
	require.Equal(t, uint64(2), uint64(gpurt.MemLocationArg(gpurt.MemLocationTypeHost, 0)))
	require.Equal(t, uint64(0xffffffff_00000001), uint64(gpurt.MemLocationArg(1, -1)))
	require.Equal(t, uint64(0x00000005_ffffffff), uint64(gpurt.MemLocationArg(-1, 5)))
}

// forEachPageable runs test for each vendor on a kernel driver over its
// fake without, then with, pageable memory access (the device attribute
// the fake reports when its PAGEABLE_ACCESS knob is set), as subtests.
func forEachPageable(t *testing.T, test func(t *testing.T, v *vendorCase, pageable bool, d gpuDriver, m *driver.Module, log *fakeLog)) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		for _, pageable := range []bool{false, true} {
			t.Run(fmt.Sprintf("pageable=%v", pageable), func(t *testing.T) {
				if pageable {
					t.Setenv(v.envPrefix+"PAGEABLE_ACCESS", "1")
				}
				d, m, log := kernelDriver(t, v, opts{})
				test(t, v, pageable, d, m, log)
			})
		}
	})
}

// A kernel that reads host memory nobody registered faults (700) on a
// device without pageable memory access; with it (the attribute the
// driver reads into DeviceInfo.PageableMemoryAccess: GB10, Grace) the
// same launch reads the memory in place.
func TestFakeKernelPageableAccess(t *testing.T) {
	forEachPageable(t, func(t *testing.T, v *vendorCase, pageable bool, d gpuDriver, m *driver.Module, log *fakeLog) {
		require.Equal(t, pageable, d.Info().PageableMemoryAccess)
		const n = 16
		xs, ys := axpyInputs(n, 1)
		host := floatBytes(xs) // ordinary Go memory: not pinned, not registered
		y, err := d.Malloc(4 * n)
		require.NoError(t, err)
		fill(t, d, y, floatBytes(ys))
		s := newStream(t, d)
		args := (&kernels.AxpyArgs{X: uint64(uintptr(unsafe.Pointer(&host[0]))), Y: uint64(y), N: n, A: 2.5}).Encode(make([]byte, kernels.AxpySize))
		within(t, time.Minute, func() { err = d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s) })
		if !pageable {
			requireCode(t, v, err, 700)
			log.ResetFaults()
			return
		}
		require.NoError(t, err)
		require.NoError(t, d.StreamSynchronize(s))
		require.Equal(t, axpyWant(xs, ys), bytesFloats(read(t, d, y, 4*n)))
		runtime.KeepAlive(host)
	})
}

// Through the allocator over each fake: MapHost of ordinary memory makes
// no registration call where the device has pageable memory access, and
// a kernel reads it in place; elsewhere it registers (and unregisters at
// Close).
func TestFakeMapHost(t *testing.T) {
	forEachPageable(t, func(t *testing.T, v *vendorCase, pageable bool, d gpuDriver, m *driver.Module, log *fakeLog) {
		a, err := alloc.New(d, alloc.Options{})
		require.NoError(t, err)
		const n = 16
		xs, ys := axpyInputs(n, 1)
		host := floatBytes(xs)
		h, err := a.Host().MapHost(host)
		require.NoError(t, err)
		require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&host[0]))), h.DevicePtr())
		y, err := a.Alloc(4 * n)
		require.NoError(t, err)
		require.NoError(t, a.Upload(y, 0, floatBytes(ys)))
		args := (&kernels.AxpyArgs{X: uint64(h.DevicePtr()), Y: uint64(y.Ptr()), N: n, A: 2.5}).Encode(make([]byte, kernels.AxpySize))
		require.NoError(t, a.Enqueue("axpy", []alloc.Buffer{y}, func(s driver.Stream) error {
			return d.LaunchKernel(m.Kernels[kernels.Axpy], 1, 4, args, s)
		}))
		got := make([]byte, 4*n)
		require.NoError(t, a.Download(got, y, 0))
		require.Equal(t, axpyWant(xs, ys), bytesFloats(got))
		require.NoError(t, h.Close())
		require.NoError(t, a.Free(y))
		require.NoError(t, a.Close())
		regs := len(find(log.Lines(), v.prefix+"HostRegister"))
		if pageable {
			require.Zero(t, regs, "pageable access: no registration")
		} else {
			require.Equal(t, 1, regs, "registered where the device has no pageable access")
		}
		runtime.KeepAlive(host)
	})
}

// The device attributes MapHost decides by, over each fake, through the
// allocator: on an HMM-like device (pageable memory access, but not
// through the host's page tables) MapHost registers b, as where there is
// no pageable access: a registration call for b in the fake's log, and
// the HostBuffer's device pointer is what the runtime's device-pointer
// call answered for b (the fake answers b's own address); Close
// unregisters. On an ATS-like device (both attributes) it makes no driver
// call, hands out b's own address and Close makes none either.
func TestFakeMapHostByPageTables(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		for _, c := range []struct {
			name                     string
			pageable, hostPageTables string
			inPlace                  bool
			profile                  string
		}{
			{"none", "0", "0", false, ""},
			{"hmm", "1", "0", false, "pageable memory access via mirrored page tables"},
			{"ats", "1", "1", true, "pageable memory access via host page tables"},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Setenv(v.envPrefix+"PAGEABLE_ACCESS", c.pageable)
				t.Setenv(v.envPrefix+"HOST_PAGE_TABLES", c.hostPageTables)
				d, log := openFake(t, v, opts{})
				info := d.Info()
				require.Equal(t, c.pageable == "1", info.PageableMemoryAccess)
				require.Equal(t, c.inPlace, info.HostPageTables)
				if c.profile == "" {
					require.NotContains(t, info.SafetyProfile(), "pageable")
				} else {
					require.Contains(t, info.SafetyProfile(), c.profile)
				}
				a, err := alloc.New(d, alloc.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = a.Close() })
				b := make([]byte, 4096)
				at := fmt.Sprintf("%p", &b[0])
				log.Lines()
				h, err := a.Host().MapHost(b)
				require.NoError(t, err)
				mapped := log.Lines()
				require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), h.DevicePtr())
				require.NoError(t, h.Close())
				closed := log.Lines()
				if c.inPlace {
					require.Empty(t, mapped, "MapHost on an ATS device")
					require.Empty(t, closed, "Close of an in-place mapping")
					return
				}
				require.Len(t, find(mapped, v.prefix+"HostRegister "+at, "n=4096"), 1, "%v", mapped)
				require.Len(t, find(mapped, v.prefix+"HostGetDevicePointer "+at), 1, "%v", mapped)
				require.Len(t, find(closed, v.prefix+"HostUnregister "+at), 1, "%v", closed)
				runtime.KeepAlive(b)
			})
		}
	})
}
