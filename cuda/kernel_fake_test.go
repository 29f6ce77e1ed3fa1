package cuda

import (
	"path/filepath"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
)

// What both drivers do with modules and launches is tested once, for
// both, in internal/gpurt (kernel_fake_test.go there); here, what only
// CUDA does: the driver API's library and the primary context.

// Without the driver API in the runtime library (the real libcudart has
// none) the driver takes it from $CAPALLOC_CUDA_DRIVER_LIB, else
// libcuda.so.1; none that has every call makes LoadModule unavailable,
// naming each library and what it lacks, while the rest of the driver
// works.
func TestFakeDriverAPIMissing(t *testing.T) {
	fake.Lib(t, "-DFAKE_NO_DRIVER_API")
	dir := t.TempDir()
	partial := filepath.Join(dir, "libcuda-partial.so")
	gpurttest.BuildShared(t, partial, []byte("int cuInit(unsigned flags) { return 0; }\n"))
	d, err := New(Options{})
	require.NoError(t, err)
	defer d.Close()

	for _, c := range []struct {
		name, env, says string
	}{
		{"a library lacking calls", partial, partial + ": lacks required symbols [cuDeviceGet "},
		{"a missing library", filepath.Join(dir, "nothing.so"), filepath.Join(dir, "nothing.so") + ": "},
	} {
		t.Setenv(DriverLibEnv, c.env)
		_, err := d.LoadModule(kernels.Image())
		require.ErrorIs(t, err, driver.ErrBackendUnavailable, c.name)
		msg := err.Error()
		require.Contains(t, msg, "no CUDA driver API for modules and kernel launches", c.name)
		require.Contains(t, msg, "lacks required symbols [cuInit cuDeviceGet", "the runtime library is tried first: "+c.name)
		require.Contains(t, msg, c.says, c.name)
		require.Contains(t, msg, DriverLibEnv, c.name)
	}
	if _, err := purego.Dlopen(driverLib, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
		t.Setenv(DriverLibEnv, "")
		_, err := d.LoadModule(kernels.Image())
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), driverLib, "the default library is named")
	}

	s, err := d.CreateStream()
	require.NoError(t, err, "the rest of the driver works")
	p, err := d.MallocAsync(256, s)
	require.NoError(t, err)
	require.NoError(t, d.FreeAsync(p, s))
	require.NoError(t, d.StreamSynchronize(s))

	// A library that has them all serves: here another build of the fake.
	other := fake.New(t)
	t.Setenv(DriverLibEnv, other)
	otherLog := gpurttest.OpenLog(t, other)
	m, err := d.LoadModule(kernels.Image())
	require.NoError(t, err)
	require.Len(t, m.Kernels, len(kernels.Names))
	require.Len(t, gpurttest.Find(otherLog.Lines(), "cuModuleLoadData"), 1, "loaded by the driver library")
}

// The module is loaded on the runtime's primary context, retained once
// and released at Close after the unload.
func TestFakePrimaryContext(t *testing.T) {
	d, log := openFake(t, Options{})
	log.Lines()
	_, err := d.LoadModule(kernels.Image())
	require.NoError(t, err)
	_, err = d.LoadModule(kernels.Image())
	require.NoError(t, err, "a second load, on the same context")
	lines := log.Lines()
	require.Len(t, gpurttest.Find(lines, "cuInit flags=0"), 1, "the driver API is bound once")
	require.Len(t, gpurttest.Find(lines, "cuDevicePrimaryCtxRetain device=0"), 1)
	loads := gpurttest.Find(lines, "cuModuleLoadData")
	require.Len(t, loads, 2)
	require.NotContains(t, loads[0], "ctx=(nil)")
	require.NoError(t, d.Close())
	lines = log.Lines()
	require.Len(t, gpurttest.Find(lines, "cuModuleUnload"), 2)
	require.Len(t, gpurttest.Find(lines, "cuDevicePrimaryCtxRelease_v2 device=0"), 1)
}

// An image without PTX is refused before any call; PTX the driver rejects
// is its code, with the driver's own text.
func TestFakeLoadModuleBadPTX(t *testing.T) {
	d, log := openFake(t, Options{})
	log.Lines()
	_, err := d.LoadModule(driver.ModuleImage{Name: "none", Kernels: []string{kernels.Axpy}})
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "has no PTX")
	require.Empty(t, gpurttest.Find(log.Lines(), "cuModuleLoadData"))

	_, err = d.LoadModule(driver.ModuleImage{Name: "junk", PTX: []byte("not ptx"), Kernels: []string{kernels.Axpy}})
	require.ErrorIs(t, err, driver.ErrDriver)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 218, e.Code)
	require.Contains(t, err.Error(), "cuModuleLoadData returned 218 (a PTX JIT compilation failed)")
}
