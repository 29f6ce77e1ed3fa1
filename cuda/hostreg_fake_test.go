package cuda

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Over the fake runtime: memory the engine owns, registered (portable and
// mapped), is copied by a captured copy at every replay, has its device
// address from cudaHostGetDevicePointer, and is unregistered at Close;
// HostFree refuses it meanwhile.
func TestFakeRegisterHost(t *testing.T) {
	fake.Lib(t)
	d, err := New(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, a.Close()) })

	b := make([]byte, 8192)
	h, err := a.Host().Register(b)
	require.NoError(t, err)
	require.Equal(t, driver.DevicePtr(uintptr(unsafe.Pointer(&b[0]))), h.DevicePtr())
	require.ErrorIs(t, d.HostFree(b), alloc.ErrInvalidValue, "HostFree of registered memory")
	dev, err := a.Alloc(8192)
	require.NoError(t, err)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return a.UploadHost(dev, 0, h, 0, 8192) })
	require.NoError(t, err)
	b[100] = 42
	require.NoError(t, g.Launch())
	got := make([]byte, 8192)
	require.NoError(t, a.Download(got, dev, 0))
	require.Equal(t, byte(42), got[100])
	require.NoError(t, g.Close())
	require.NoError(t, h.Close())
	require.ErrorIs(t, d.HostUnregister(b), alloc.ErrInvalidValue, "unregistered at Close")
	require.NoError(t, a.Free(dev))
}
