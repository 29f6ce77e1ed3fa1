package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

func TestLibrarySearchOrder(t *testing.T) {
	require.Equal(t, []string{
		"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so",
		"/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12",
		"/usr/local/cuda/lib64/libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so",
	}, search.Candidates(gpurttest.Env(nil)))
	require.Equal(t, []string{
		"/opt/cuda/lib64/libcudart.so.13", "/opt/cuda/lib64/libcudart.so.12",
		"/opt/cuda/lib64/libcudart.so.11.0", "/opt/cuda/lib64/libcudart.so",
		"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so",
		"/usr/local/cuda/lib64/libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.12",
		"/usr/local/cuda/lib64/libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so",
	}, search.Candidates(gpurttest.Env(map[string]string{"CUDA_HOME": "/opt/cuda"})))
	require.Equal(t, []string{"/x/libcudart.so.12"},
		search.Candidates(gpurttest.Env(map[string]string{LibEnv: " /x/libcudart.so.12 ", "CUDA_HOME": "/opt/cuda"})), "the override is the only candidate")
}

// A search that finds only a file that is not a library names every path
// it tried, with dlopen's reason.
func TestUnavailableNamesEveryPathAndReason(t *testing.T) {
	gpurttest.UnavailableNamesEveryPath(t, &loader)
}

// realRuntimeEnv names a real libcudart for the TestRealRuntime tests
// (.ci/run installs Debian's libcudart11.0, 11.8.89, and sets it): they
// check what the real library answers on a machine without a GPU.
const realRuntimeEnv = "CAPALLOC_REAL_CUDART"

func realRuntime(t *testing.T) string {
	t.Helper()
	return gpurttest.RealRuntime(t, realRuntimeEnv, "Debian's libcudart.so.11.0")
}

// Every symbol the driver binds for the real library's version is in it,
// resolved through purego as the driver does (no nm): the real runtime
// cannot report its version without a driver, so the bindings are those
// of the version its file name gives (11.8 for Debian's 11.8.89).
func TestRealRuntimeHasEverySymbol(t *testing.T) {
	path := realRuntime(t)
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	v, major := fileVersion(path)
	if major == 0 {
		t.Skipf("%s: no version in the file name", path)
	}
	minor := 0
	if _, m, ok := strings.Cut(v, "."); ok {
		minor, _ = strconv.Atoi(m)
	}
	var rt runtimeAPI
	bs, err := rt.bindings(major*1000 + minor*10)
	require.NoError(t, err)
	require.NoError(t, resolve(h, path, bs), "every required symbol resolves in %s (runtime %s)", path, v)
	for _, b := range bs {
		if b.Sym.Addr == 0 {
			require.True(t, b.Optional, b.Name)
			t.Logf("optional symbol %s absent from %s", b.Name, path)
		}
		switch b.Name {
		case "cudaDeviceGetPCIBusId", "cudaDeviceCanAccessPeer", "cudaDeviceEnablePeerAccess": // optional, and in every 11.x+
			require.NotZero(t, b.Sym.Addr, "%s in %s", b.Name, path)
		}
	}
}

// Without a driver the real runtime fails cudaRuntimeGetVersion itself with
// 35 and reports driver version 0: the library is refused with that reason,
// and the search moves on to the next candidate.
func TestRealRuntimeWithoutGPU(t *testing.T) {
	path := realRuntime(t)
	if h, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL); err == nil {
		purego.Dlclose(h)
		// A driver library without a device: the runtime reports 100.
		_, err := loader.First([]string{path}, nil)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), path+": runtime version: cudaRuntimeGetVersion returned 100")
		return
	}
	_, err := loader.First([]string{path}, nil)
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	msg := err.Error()
	t.Log(msg)
	require.Contains(t, msg, path+": runtime version: cudaRuntimeGetVersion returned 35 (CUDA driver version is insufficient for CUDA runtime version)",
		"the real runtime's own answer without a driver")
	require.Contains(t, msg, "no CUDA driver is installed (cudaDriverGetVersion reports 0")
	var e *Error
	require.ErrorAs(t, err, &e, "the code is kept")
	require.Equal(t, 35, e.Code)

	// The real library first, a working one after it: the second is used.
	good := fake.Lib(t)
	rt, err := loader.First([]string{path, good}, nil)
	require.NoError(t, err)
	require.Equal(t, good, rt.Path)

	// The default search finds it too (it is libcudart.so.11.0 on the
	// loader's path) and gives the same reason.
	t.Setenv(LibEnv, "")
	_, err = New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "libcudart.so.11.0: runtime version: cudaRuntimeGetVersion returned 35")
}

// oldDriverEnv marks the child process of TestRealRuntimeWithOldDriver.
const oldDriverEnv = "CAPALLOC_TEST_OLD_DRIVER"

// With a driver too old for it, the real runtime also fails
// cudaRuntimeGetVersion with 35, and cudaDriverGetVersion reports the old
// version. The driver is a stand-in libcuda.so.1 that exports only
// cuDriverGetVersion (cuda.h: CUresult cuDriverGetVersion(int
// *driverVersion)) and reports CUDA 10.2: the 11.8 runtime reads the
// version and refuses before it needs anything else. The runtime finds
// libcuda.so.1 through LD_LIBRARY_PATH, read at process start, so the test
// runs itself again in a child process.
func TestRealRuntimeWithOldDriver(t *testing.T) {
	path := realRuntime(t)
	if os.Getenv(oldDriverEnv) != "" {
		_, err := loader.First([]string{path}, nil)
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		msg := err.Error()
		t.Log(msg)
		require.Contains(t, msg, path+": runtime version: cudaRuntimeGetVersion returned 35 (CUDA driver version is insufficient for CUDA runtime version)")
		require.Contains(t, msg, "needs a driver for CUDA 11, driver supports 10.2")
		return
	}
	dir := t.TempDir()
	gpurttest.BuildShared(t, filepath.Join(dir, "libcuda.so.1"), []byte("int cuDriverGetVersion(int *v) { *v = 10020; return 0; }\n"))

	cmd := exec.Command(os.Args[0], "-test.run=^TestRealRuntimeWithOldDriver$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), oldDriverEnv+"=1", "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child:\n%s", out)
	require.Contains(t, string(out), "--- PASS: TestRealRuntimeWithOldDriver")
	t.Logf("child:\n%s", out)
}
