//go:build unix

package alloc_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// mmapFile maps a file of n bytes, each byte its offset mod 251, shared.
func mmapFile(t *testing.T, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i % 251)
	}
	path := filepath.Join(t.TempDir(), "weights.bin")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return m
}

// A registered mmap'ed region is copied by a captured copy at every
// replay (the bytes it holds then), has a device address (on cpu its own),
// and is unregistered at Close.
func TestRegisterHostCapturedCopy(t *testing.T) {
	_, a, s := hostAllocator(t, cpu.Options{}, alloc.Options{})
	m := mmapFile(t, 64<<10)
	h, err := a.Host().Register(m)
	require.NoError(t, err)
	require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&m[0]))), h.DevicePtr())
	dev, err := a.Alloc(64 << 10)
	require.NoError(t, err)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return a.UploadHost(dev, 0, h, 0, 64<<10) })
	require.NoError(t, err)
	m[7] = 200 // written after the capture: the replay reads it
	require.NoError(t, g.Launch())
	got := make([]byte, 64<<10)
	require.NoError(t, a.Download(got, dev, 0))
	require.Equal(t, byte(200), got[7])
	require.Equal(t, byte(8), got[8])
	require.NoError(t, g.Close())
	require.NoError(t, h.Close())
	require.Zero(t, h.DevicePtr())
	require.EqualValues(t, 1, s.Snapshot()[alloctest.MethodHostUnregister])
	require.NoError(t, a.Free(dev))
}

// Registration is refused during captures that forbid unsafe calls,
// before the driver; under strict safety during any capture. Overlapping
// registrations and empty memory are refused with typed errors.
func TestRegisterHostRefusals(t *testing.T) {
	_, a, s := hostAllocator(t, cpu.Options{Profile: cpu.ProfileGB10}, alloc.Options{})
	b := make([]byte, 8192)
	_, err := a.Host().Register(nil)
	require.ErrorIs(t, err, alloc.ErrInvalidSize)
	require.NoError(t, a.BeginCapture(alloc.Relaxed))
	_, err = a.Host().Register(b)
	requireStrict(t, err, "Register during a Relaxed capture under strict safety")
	require.Zero(t, s.Snapshot()[alloctest.MethodHostRegister], "refused before the driver")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
	h, err := a.Host().Register(b)
	require.NoError(t, err)
	_, err = a.Host().Register(b[4096:])
	require.ErrorIs(t, err, alloc.ErrInvalidValue, "overlapping registration")
	require.NoError(t, h.Close())
}
