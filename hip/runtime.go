package hip

import (
	"fmt"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// runtimeAPI is one loaded libamdhip64: its version and resolved symbols.
// Calls go through purego.SyscallN on the cached address (gpurt.Call,
// gpurt.CallHot: no reflection, no allocation on the hot path); only
// hipGetErrorString (a string result) and hipIpcOpenMemHandle (a 64-byte
// struct by value), both off the hot path, use purego.RegisterFunc.
type runtimeAPI struct {
	gpurt.Runtime     // Version: major*10^7 + minor*10^5 + patch (HIP_VERSION's encoding)
	devices       int // hipGetDeviceCount at load
	// deviceGetName and deviceTotalMem name the device and give its total
	// memory (not the properties struct: symbols.go).
	deviceGetName, deviceTotalMem gpurt.Sym
	// The kernels' calls (module.go), all optional.
	getDevice, props, propsR0600                                        gpurt.Sym
	moduleLoadData, moduleGetFunction, moduleUnload, moduleLaunchKernel gpurt.Sym
	moduleOccupancy                                                     gpurt.Sym // optional even for the kernels
	// Virtual memory's calls (vm.go), all optional.
	memGranularity, memAddressReserve, memAddressFree, memCreate gpurt.Sym
	memRelease, memMap, memUnmap, memSetAccess                   gpurt.Sym
	// handle is the library's dlopen handle (ROCm 5.x exports hiprtc from
	// it).
	handle uintptr
}

// bind reads the version of the library at path, resolves its symbols and
// probes for a device once.
//
// Not used: hipDriverGetVersion, which in ROCm reports the HIP version
// again (50221153 from Debian's 5.2.3 on a machine without any GPU or
// kernel driver), so it cannot tell "no driver" from "driver present".
// Without a GPU the runtime answers hipRuntimeGetVersion, fails
// hipGetDeviceCount with 100 (hipErrorNoDevice) and most other calls with
// 101 (hipErrorInvalidDevice); it neither hangs nor prints.
func bind(path string, h uintptr) (*runtimeAPI, error) {
	rt := &runtimeAPI{handle: h}
	rt.Path, rt.Vendor, rt.Explain = path, &vendor, rt.explain
	var getRT, getStr gpurt.Sym
	if err := vendor.Identify(h, path, search.Product, gpurt.Required("hipRuntimeGetVersion", &getRT),
		gpurt.Required("hipGetErrorString", &getStr)); err != nil {
		return nil, err
	}
	purego.RegisterFunc(&rt.ErrorString, getStr.Addr)

	var err error
	if rt.Version, err = rt.Query("runtime version", getRT); err != nil {
		return nil, err
	}
	if err := resolve(h, path, rt.bindings()); err != nil {
		return nil, err
	}
	// The one device probe: the loader moves on to the next library when
	// this one sees no device.
	if rt.devices, err = rt.Bound(rt.ipcOpenFlags()); err != nil {
		return nil, err
	}
	if rt.devices == 0 {
		return nil, rt.Unusable("count devices", rt.GetDeviceCount.Name, errNoDevice)
	}
	return rt, nil
}

// explain is the runtime's gpurt.Runtime.Explain: the library and its
// version, and for no device what that means.
func (rt *runtimeAPI) explain(code int) (lib, why string) {
	v := "version unknown"
	if rt.Version > 0 {
		v = "HIP runtime " + versionString(rt.Version)
	}
	if code == errNoDevice {
		why = "no AMD GPU is visible to this runtime (no /dev/kfd, no amdgpu kernel driver, or HIP_VISIBLE_DEVICES hides them)"
	}
	return fmt.Sprintf("%s (%s)", rt.Path, v), why
}

// Capture of pool allocations as graph nodes arrived in ROCm 5.5 and
// auto-free-on-launch in 5.6; before, hipMallocAsync inside a capture
// allocates at once and the graph does not own the memory. Capture with
// pools, the contract alloc is built on, needs 5.6.
const (
	minCaptureVersion = 50600000
	version6          = 60000000
)

// checkCaptureVersion refuses a runtime too old to capture with pools,
// unless the caller gave up capture (no_capture).
func checkCaptureVersion(rt *runtimeAPI, noCapture bool) error {
	if noCapture || rt.Version >= minCaptureVersion {
		return nil
	}
	return fmt.Errorf("%w: hip: %s: HIP runtime %s is older than %s: it cannot capture pool allocations into graphs (graph allocation nodes arrived in ROCm 5.5, auto-free-on-launch in 5.6; before, hipMallocAsync in a capture allocates at once); open with no_capture=true to use it without graphs",
		driver.ErrBackendUnavailable, rt.Path, versionString(rt.Version), versionString(minCaptureVersion))
}

// versionString renders HIP_VERSION's encoding (hip_version.h:
// major*10000000 + minor*100000 + patch): 50221153 is "5.2.21153".
func versionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000000, v%10000000/100000, v%100000)
}
