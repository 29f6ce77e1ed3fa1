package cuda

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

func names(t *testing.T, version int) (required, optional []string) {
	t.Helper()
	var rt runtimeAPI
	bs, err := rt.bindings(version)
	require.NoError(t, err)
	for _, b := range bs {
		if b.Optional {
			optional = append(optional, b.Name)
		} else {
			required = append(required, b.Name)
		}
	}
	return required, optional
}

func TestBindingsByRuntimeVersion(t *testing.T) {
	for _, c := range []struct {
		version int
		props   string
	}{
		{11040, "cudaGetDeviceProperties"},
		{11080, "cudaGetDeviceProperties"},
		{12000, "cudaGetDeviceProperties_v2"},
		{12090, "cudaGetDeviceProperties_v2"},
		{13000, "cudaGetDeviceProperties"},
	} {
		req, opt := names(t, c.version)
		require.Equal(t, []string{c.props, "cudaDeviceGraphMemTrim", "cudaHostGetDevicePointer", "cudaMallocManaged", "cudaMemPrefetchAsync", "cudaDeviceGetPCIBusId", "cudaDeviceCanAccessPeer", "cudaDeviceEnablePeerAccess"}, opt, "version %d", c.version)
		// cudaMemPrefetchAsync's parameters changed in CUDA 13 under the
		// same name: bound to the location ABI from 13.0 only.
		var rt runtimeAPI
		bs, err := rt.bindings(c.version)
		require.NoError(t, err)
		i := slices.IndexFunc(bs, func(b gpurt.Binding) bool { return b.Name == "cudaMemPrefetchAsync" })
		want := &rt.MemPrefetchAsync
		if c.version >= 13000 {
			want = &rt.MemPrefetchLocation
		}
		require.Same(t, want, bs[i].Sym, "version %d", c.version)
		for _, must := range []string{"cudaStreamIsCapturing", "cudaGraphInstantiateWithFlags", "cudaMallocFromPoolAsync", "cudaMemPoolCreate", "cudaStreamBeginCapture"} {
			require.Contains(t, req, must)
		}
		for _, never := range []string{"cudaGraphInstantiate", "cudaStreamGetCaptureInfo", "cudaStreamGetCaptureInfo_v2"} {
			require.False(t, slices.Contains(req, never) || slices.Contains(opt, never), "%s has a version-dependent signature", never)
		}
	}
	var rt runtimeAPI
	_, err := rt.bindings(11030)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "11.3 is older than the minimum 11.4")
}

func TestCheckVersions(t *testing.T) {
	require.NoError(t, checkVersions("lib", 12040, 12020), "minor-version compatibility")
	require.NoError(t, checkVersions("lib", 12040, 13000))
	for _, c := range []struct {
		rt, drv int
		msg     string
	}{
		{11020, 12000, "lib: runtime 11.2 is older than the minimum, 11.4"},
		{12040, 0, "no CUDA driver is installed"},
		{13000, 12080, "lib: runtime 13.0 needs a driver for CUDA 13, driver supports 12.8"},
	} {
		err := checkVersions("lib", c.rt, c.drv)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), c.msg)
	}
}

func TestCaptureModeAndStatusMapping(t *testing.T) {
	for m, want := range map[alloc.CaptureMode]uintptr{alloc.Global: 0, alloc.ThreadLocal: 1, alloc.Relaxed: 2} {
		got, err := vendor.CaptureMode(m)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := vendor.CaptureMode(alloc.CaptureMode(42))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	for st, want := range map[int32]driver.CaptureStatus{0: driver.CaptureNone, 1: driver.CaptureActive, 2: driver.CaptureInvalidated} {
		got, err := vendor.CaptureStatus(st, "cudaStreamIsCapturing")
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err = vendor.CaptureStatus(3, "cudaStreamIsCapturing")
	require.ErrorIs(t, err, driver.ErrDriver)
}

// The fake reports the runtime version it is told; the bound properties
// symbol follows it, and an old runtime is refused with its version.
func TestFakeVersionChoosesBindings(t *testing.T) {
	for _, c := range []struct {
		version string
		props   string
	}{{"11080", "cudaGetDeviceProperties device=0"}, {"13000", "cudaGetDeviceProperties device=0"}, {"12040", "cudaGetDeviceProperties_v2 device=0"}} {
		t.Run(c.version, func(t *testing.T) {
			t.Setenv("FAKE_CUDART_VERSION", c.version)
			t.Setenv("FAKE_CUDA_DRIVER_VERSION", "13000")
			_, log := openFake(t, Options{})
			require.Len(t, gpurttest.Find(log.Lines(), c.props), 1)
		})
	}
	path := fake.Lib(t)
	t.Setenv("FAKE_CUDART_VERSION", "11020")
	_, err := New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), path+": runtime 11.2 is older than the minimum, 11.4")
	fake.Lib(t)
	t.Setenv("FAKE_CUDART_VERSION", "12040")
	t.Setenv("FAKE_CUDA_DRIVER_VERSION", "0")
	_, err = New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "no CUDA driver is installed")
}
