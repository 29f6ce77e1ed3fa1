package alloc_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// Managed memory: written through Bytes, prefetched to the device in
// stream order, copied by a captured copy at every replay, prefetched back
// to the host, and freed at Close.
func TestManagedPrefetchAndCapturedCopy(t *testing.T) {
	_, a, s := hostAllocator(t, cpu.Options{}, alloc.Options{})
	m, err := a.Host().AllocManaged(1 << 20)
	require.NoError(t, err)
	require.NotZero(t, m.DevicePtr())
	for i := range m.Bytes() {
		m.Bytes()[i] = byte(i % 251)
	}
	require.NoError(t, a.Host().Prefetch(m, alloc.OnDevice))
	dev, err := a.Alloc(1 << 20)
	require.NoError(t, err)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return a.UploadHost(dev, 0, m, 0, 1<<20) })
	require.NoError(t, err)
	m.Bytes()[9] = 77 // written after the capture: the replay reads it
	require.NoError(t, g.Launch())
	require.NoError(t, a.Host().Prefetch(m, alloc.OnHost))
	got := make([]byte, 1<<20)
	require.NoError(t, a.Download(got, dev, 0))
	require.Equal(t, byte(77), got[9])
	require.Equal(t, byte(10), got[10])
	require.NoError(t, g.Close())
	require.NoError(t, a.Free(dev))
	require.NoError(t, m.Close())
	require.Nil(t, m.Bytes())
	c := s.Snapshot()
	require.EqualValues(t, 1, c[alloctest.MethodMallocManaged])
	require.EqualValues(t, 2, c[alloctest.MethodPrefetchManaged])
	require.EqualValues(t, 1, c[alloctest.MethodFreeManaged])
	require.ErrorIs(t, a.Host().Prefetch(m, alloc.OnDevice), alloc.ErrClosed)
}

// A managed allocation and a prefetch are refused during any capture,
// before the driver: in every mode on a documented device (no recorded
// table says otherwise) and under strict safety (gb10), for a capture
// of this allocator or of another in the same capture domain. Bad input
// gets typed errors.
func TestManagedRefusedDuringCaptures(t *testing.T) {
	for _, p := range []string{"", cpu.ProfileGB10} {
		for _, mode := range []alloc.CaptureMode{alloc.Global, alloc.ThreadLocal, alloc.Relaxed} {
			d, a, s := hostAllocator(t, cpu.Options{Profile: p}, alloc.Options{})
			m, err := a.Host().AllocManaged(4096)
			require.NoError(t, err)
			other, err := alloc.New(d, alloc.Options{})
			require.NoError(t, err)
			for _, capturer := range []*alloc.Allocator{a, other} {
				require.NoError(t, capturer.BeginCapture(mode))
				_, err = a.Host().AllocManaged(4096)
				require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, "profile %q, %s capture", p, mode)
				require.ErrorIs(t, a.Host().Prefetch(m, alloc.OnDevice), alloc.ErrCaptureIncompatibleAllocation, "profile %q, %s capture", p, mode)
				g, err := capturer.EndCapture()
				require.NoError(t, err, "the capture survives the refusals")
				require.NoError(t, g.Close())
			}
			c := s.Snapshot()
			require.EqualValues(t, 1, c[alloctest.MethodMallocManaged], "refused before the driver")
			require.Zero(t, c[alloctest.MethodPrefetchManaged], "refused before the driver")
			require.NoError(t, m.Close())
			require.NoError(t, other.Close())
		}
	}
	_, a, _ := hostAllocator(t, cpu.Options{}, alloc.Options{})
	_, err := a.Host().AllocManaged(0)
	require.ErrorIs(t, err, alloc.ErrInvalidSize)
	h, err := a.HostAlloc(4096)
	require.NoError(t, err)
	require.ErrorIs(t, a.Host().Prefetch(h, alloc.OnDevice), alloc.ErrInvalidBuffer, "pinned memory is not managed")
	require.NoError(t, h.Close())
	m, err := a.Host().AllocManaged(4096)
	require.NoError(t, err)
	require.ErrorIs(t, a.Host().Prefetch(m, alloc.Place(7)), alloc.ErrInvalidValue)
	require.NoError(t, m.Close())
	require.ErrorIs(t, m.Close(), alloc.ErrClosed)
}

// noManaged is a driver without driver.ManagedMemory.
type noManaged struct{ driver.Driver }

func TestManagedUnsupported(t *testing.T) {
	d := newCPU(t, 0)
	a, err := alloc.New(noManaged{d}, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	_, err = a.Host().AllocManaged(4096)
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
}

// MapHost on a device that reads pageable memory through the host's page
// tables (gb10) gives b's own address with no driver call, during a
// capture too, and Close makes none; on other devices it registers.
func TestMapHost(t *testing.T) {
	_, a, s := hostAllocator(t, cpu.Options{Profile: cpu.ProfileGB10}, alloc.Options{})
	b := make([]byte, 8192)
	require.NoError(t, a.BeginCapture(alloc.Global))
	h, err := a.Host().MapHost(b)
	require.NoError(t, err, "no driver call: allowed during a capture under strict safety")
	require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), h.DevicePtr())
	require.NoError(t, h.Close(), "no driver call: allowed during a capture")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	before := s.Snapshot()
	require.Zero(t, before[alloctest.MethodHostRegister]+before[alloctest.MethodHostUnregister])
	_, err = a.Host().MapHost(nil)
	require.ErrorIs(t, err, alloc.ErrInvalidSize)

	_, a, s = hostAllocator(t, cpu.Options{}, alloc.Options{})
	h, err = a.Host().MapHost(b)
	require.NoError(t, err)
	require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), h.DevicePtr())
	require.NoError(t, h.Close())
	c := s.Snapshot()
	require.EqualValues(t, 1, c[alloctest.MethodHostRegister], "registered where the device has no pageable access")
	require.EqualValues(t, 1, c[alloctest.MethodHostUnregister])
}

// hmmDriver is the cpu driver's gb10 device reporting HMM's pageable
// access: coherent, but through the driver's mirror of the host's page
// tables, not the tables themselves.
type hmmDriver struct{ *cpu.Driver }

func (d hmmDriver) Info() driver.DeviceInfo {
	i := d.Driver.Info()
	i.HostPageTables = false
	return i
}

// On an HMM device MapHost registers b as where there is no pageable
// access (its kernels' reads could otherwise migrate b's pages into device
// memory the allocator does not see), so it is refused during a capture
// under strict safety, before the driver, and Close unregisters.
func TestMapHostRegistersOnHMM(t *testing.T) {
	d, err := cpu.New(cpu.Options{Profile: cpu.ProfileGB10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	s := alloctest.NewSpy(hmmDriver{d})
	a, err := alloc.New(s, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	require.True(t, a.Info().PageableMemoryAccess)
	require.False(t, a.Info().ReadsHostInPlace())
	b := make([]byte, 8192)
	require.NoError(t, a.BeginCapture(alloc.Global))
	_, err = a.Host().MapHost(b)
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, "a registration during a capture under strict safety")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.Zero(t, s.Snapshot()[alloctest.MethodHostRegister], "refused before the driver")
	h, err := a.Host().MapHost(b)
	require.NoError(t, err)
	require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), h.DevicePtr())
	require.EqualValues(t, 1, s.Snapshot()[alloctest.MethodHostRegister], "registered on an HMM device")
	require.NoError(t, h.Close())
	require.EqualValues(t, 1, s.Snapshot()[alloctest.MethodHostUnregister])
}
