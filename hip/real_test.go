package hip

import (
	"os"
	"regexp"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// realRuntimeEnv names a real libamdhip64 for the TestRealRuntime tests
// (.ci/run installs Debian's libamdhip64-5, ROCm 5.2.3, and sets it): they
// check what the real library answers on a machine without an AMD GPU.
const realRuntimeEnv = "CAPALLOC_REAL_HIP"

func realRuntime(t *testing.T) string {
	t.Helper()
	path := gpurttest.RealRuntime(t, realRuntimeEnv, "Debian's libamdhip64.so.5")
	if _, err := os.Stat("/dev/kfd"); err == nil {
		t.Skip("/dev/kfd exists: this machine may have an AMD GPU; these tests are for one without")
	}
	return path
}

// Every symbol the driver binds is in the real library: resolved through
// purego, as the driver does (no nm).
func TestRealRuntimeHasEverySymbol(t *testing.T) {
	path := realRuntime(t)
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	var rt runtimeAPI
	bs := rt.bindings()
	require.NoError(t, resolve(h, path, bs), "every required symbol resolves")
	for _, b := range bs {
		if b.Sym.Addr == 0 {
			require.True(t, b.Optional, b.Name)
			t.Logf("optional symbol %s absent from %s", b.Name, path)
		}
	}
	for _, name := range []string{"hipRuntimeGetVersion", "hipGetErrorString"} {
		_, err := purego.Dlsym(h, name)
		require.NoError(t, err, name)
	}
	// The kernels' calls are optional for the binding (LoadModule says
	// what is missing); 5.2.3 has them all but hipGetDevicePropertiesR0600
	// (ROCm 6's properties layout). So are virtual memory's, which 5.2.3
	// has too.
	for _, s := range []*gpurt.Sym{&rt.getDevice, &rt.props, &rt.moduleLoadData, &rt.moduleGetFunction, &rt.moduleUnload, &rt.moduleLaunchKernel,
		&rt.moduleOccupancy, &rt.DeviceGetPCIBusId, &rt.DeviceCanAccessPeer, &rt.DeviceEnablePeerAccess,
		&rt.memGranularity, &rt.memAddressReserve, &rt.memAddressFree, &rt.memCreate, &rt.memRelease, &rt.memMap, &rt.memUnmap, &rt.memSetAccess} {
		require.NotZero(t, s.Addr, s.Name)
	}
}

// Without a GPU the real runtime reports its version, fails
// hipGetDeviceCount with 100 and names it hipErrorNoDevice; the library is
// refused with that reason and the version found, and the search moves on
// to the next candidate.
func TestRealRuntimeWithoutGPU(t *testing.T) {
	path := realRuntime(t)
	_, err := loader.First([]string{path}, func(*runtimeAPI) error { return nil })
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	msg := err.Error()
	t.Log(msg)
	// The path itself, or (when an earlier search in this process loaded
	// the same file under its soname) the path as another name for it.
	require.Regexp(t, regexp.QuoteMeta(path)+`(: the same library as \S+)? \(HIP runtime \d+\.\d+\.\d+\): count devices: hipGetDeviceCount: no device \(hipErrorNoDevice, 100\)`, msg)
	var e *Error
	require.ErrorAs(t, err, &e, "the code is kept")
	require.Equal(t, errNoDevice, e.Code)
	require.Equal(t, "hipErrorNoDevice", e.Text, "5.2.3's hipGetErrorString returns the name")

	// The real library first, a working one after it: the second is used.
	good := fake.Lib(t)
	rt, err := loader.First([]string{path, good}, func(*runtimeAPI) error { return nil })
	require.NoError(t, err)
	require.Equal(t, good, rt.Path)

	// The default search finds it (libamdhip64.so.5 on the loader's path)
	// and gives the same reason, and the reason beats the version gate:
	// 5.2 would be refused for capture too, but no device comes first.
	t.Setenv(LibEnv, "")
	_, err = New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Regexp(t, `libamdhip64\.so\.5(: the same library as \S+)? \(HIP runtime \d+\.\d+\.\d+\): count devices: hipGetDeviceCount: no device \(hipErrorNoDevice, 100\)`, err.Error())
}

// The calls the driver makes with the real library's calling convention,
// the 64-byte hipIpcMemHandle_t passed by value among them, return codes
// (the runtime has no device to act on) rather than crash.
func TestRealRuntimeCallsReturnCodes(t *testing.T) {
	path := realRuntime(t)
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	require.NoError(t, err)
	rt := &runtimeAPI{}
	rt.Path = path
	require.NoError(t, resolve(h, path, rt.bindings()))
	getStr, err := purego.Dlsym(h, "hipGetErrorString")
	require.NoError(t, err)
	purego.RegisterFunc(&rt.ErrorString, getStr)
	purego.RegisterFunc(&rt.IPCOpen, rt.IPCOpenMemHandle.Addr)

	var p uintptr
	var handle ipcMemHandle
	code := rt.IPCOpen(&p, handle, ipcLazyEnablePeerAccessBefore6)
	require.NotZero(t, code)
	t.Logf("hipIpcOpenMemHandle(zero handle) = %d %s", code, rt.Text(code))
	code = gpurt.Call(rt.IPCGetMemHandle.Addr, uintptr(unsafe.Pointer(&handle)), 0)
	require.NotZero(t, code)
	t.Logf("hipIpcGetMemHandle(NULL) = %d %s", code, rt.Text(code))
	code = gpurt.Call(rt.SetDevice.Addr, 0)
	require.Equal(t, int32(errInvalidDevice), code, "hipSetDevice without a GPU")
	var mode = int32(gpurt.CaptureModeRelaxed)
	code = gpurt.Call(rt.ThreadExchangeCaptureMode.Addr, uintptr(unsafe.Pointer(&mode)))
	t.Logf("hipThreadExchangeStreamCaptureMode = %d %s", code, rt.Text(code))
}
