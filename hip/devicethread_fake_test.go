package hip

import (
	"errors"
	"os"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// OnDevice runs fn on a thread where the driver's device is current (the
// fake logs each call's current device): what RCCL's ncclCommInitRank
// needs. fn's error comes back; after Close it is refused.
func TestFakeOnDeviceRunsWithTheDeviceCurrent(t *testing.T) {
	t.Setenv("FAKE_HIP_DEVICES", "2")
	d, log := openFake(t, Options{Device: 1})
	h, err := purego.Dlopen(os.Getenv(LibEnv), purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	count, err := purego.Dlsym(h, "hipGetDeviceCount")
	require.NoError(t, err)
	log.Lines()
	var n int32
	require.NoError(t, d.OnDevice("test", func() error {
		purego.SyscallN(count, uintptr(unsafe.Pointer(&n)))
		return nil
	}))
	require.EqualValues(t, 2, n)
	require.Len(t, gpurttest.Find(log.Lines(), "dev=1 hipGetDeviceCount"), 1, "device 1 was current where fn ran")
	boom := errors.New("boom")
	require.ErrorIs(t, d.OnDevice("test", func() error { return boom }), boom)
	require.NoError(t, d.Close())
	require.ErrorIs(t, d.OnDevice("test", func() error { t.Error("ran after Close"); return nil }), alloc.ErrClosed)
}
