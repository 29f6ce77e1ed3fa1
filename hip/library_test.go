package hip

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The order issue 9 and docs/hip-backend.md give: the override alone;
// else $ROCM_PATH/lib, the loader's path, /opt/rocm/lib; newest soname
// first in each.
func TestLibrarySearchOrder(t *testing.T) {
	bare := []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}
	opt := []string{"/opt/rocm/lib/libamdhip64.so.7", "/opt/rocm/lib/libamdhip64.so.6", "/opt/rocm/lib/libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"}
	require.Equal(t, append(append([]string{}, bare...), opt...), search.Candidates(gpurttest.Env(nil)))
	rocm := []string{"/r/lib/libamdhip64.so.7", "/r/lib/libamdhip64.so.6", "/r/lib/libamdhip64.so.5", "/r/lib/libamdhip64.so"}
	require.Equal(t, append(append(rocm, bare...), opt...), search.Candidates(gpurttest.Env(map[string]string{"ROCM_PATH": "/r"})))
	require.Equal(t, []string{"/x/libamdhip64.so.6"},
		search.Candidates(gpurttest.Env(map[string]string{LibEnv: " /x/libamdhip64.so.6 ", "ROCM_PATH": "/r"})), "the override is the only candidate")
}

// A search that finds only a file that is not a library names every path
// it tried, with dlopen's reason.
func TestUnavailableNamesEveryPathAndReason(t *testing.T) {
	gpurttest.UnavailableNamesEveryPath(t, &loader)
}

// A library that reports a version but lacks a required symbol is refused
// with the list of what is missing, and the search moves on.
func TestLibraryLackingSymbolsIsSkipped(t *testing.T) {
	fake.Prepare(t)
	partial := filepath.Join(t.TempDir(), "libamdhip64.so.7")
	gpurttest.BuildShared(t, partial, []byte(`
int hipRuntimeGetVersion(int *v) { *v = 70000000; return 0; }
const char *hipGetErrorString(int e) { return "hipErrorUnknown"; }
int hipGetDeviceCount(int *n) { *n = 1; return 0; }
`))
	good := fake.Lib(t)
	rt, err := loader.First([]string{partial, good}, func(*runtimeAPI) error { return nil })
	require.NoError(t, err)
	require.Equal(t, good, rt.Path)
	_, err = loader.First([]string{partial}, func(*runtimeAPI) error { return nil })
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), partial+": lacks required symbols [hipSetDevice ")
	require.NotContains(t, err.Error(), "hipDeviceGraphMemTrim", "an optional symbol is not required")
}

// Without a device the library is refused with 100, named both ways, and
// the search moves on to a library that has one.
func TestNoDeviceIsUnavailableAndSkipped(t *testing.T) {
	t.Setenv("FAKE_HIP_DEVICES", "0")
	none := fake.Lib(t)
	_, err := New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), none+" (HIP runtime 6.1.0): count devices: hipGetDeviceCount: no device (hipErrorNoDevice, 100): no AMD GPU is visible")
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, errNoDevice, e.Code)

	t.Setenv("FAKE_HIP_DEVICES", "1")
	good := fake.Lib(t)
	rt, err := loader.First([]string{none, good}, func(*runtimeAPI) error { return nil })
	require.NoError(t, err)
	require.Equal(t, good, rt.Path)
}
