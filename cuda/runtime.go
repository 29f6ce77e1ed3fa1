package cuda

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// runtimeAPI is one loaded libcudart: its versions and resolved symbols.
// Calls go through purego.SyscallN on the cached address (about 65 ns, no
// allocation: gpurt.Call, gpurt.CallHot) rather than reflective
// RegisterFunc wrappers (170-250 ns plus allocations); only
// cudaGetErrorString (its string result) and cudaIpcOpenMemHandle (its
// 64-byte struct argument by value), off the hot path, use RegisterFunc.
type runtimeAPI struct {
	gpurt.Runtime // Version is cudaRuntimeGetVersion's answer
	driverVersion int
	// getDeviceProperties is cudaGetDeviceProperties[_v2] (optional).
	getDeviceProperties gpurt.Sym
	// handle is the library's dlopen handle: the driver API for modules
	// and launches is looked up there first (driverapi.go).
	handle uintptr

	drvMu sync.Mutex
	drv   *driverAPI // bound at the first LoadModule
}

// bind checks the versions of the library at path and resolves its symbols.
func bind(path string, h uintptr) (*runtimeAPI, error) {
	rt := &runtimeAPI{driverVersion: -1, handle: h} // -1: not read yet
	rt.Path, rt.Vendor, rt.NoText, rt.Explain = path, &vendor, "unknown error", rt.explain
	var getRT, getDrv, getStr gpurt.Sym
	if err := vendor.Identify(h, path, search.Product, gpurt.Required("cudaRuntimeGetVersion", &getRT),
		gpurt.Required("cudaDriverGetVersion", &getDrv), gpurt.Required("cudaGetErrorString", &getStr)); err != nil {
		return nil, err
	}
	purego.RegisterFunc(&rt.ErrorString, getStr.Addr)

	// The driver's version first: the real runtime answers it (0 when no
	// driver is installed) even when it cannot report its own.
	v, err := rt.Query("driver version", getDrv)
	if err != nil {
		return nil, err
	}
	rt.driverVersion = v
	if rt.Version, err = rt.Query("runtime version", getRT); err != nil {
		return nil, err
	}
	if err := checkVersions(path, rt.Version, rt.driverVersion); err != nil {
		return nil, err
	}
	bs, err := rt.bindings(rt.Version)
	if err != nil {
		return nil, err
	}
	if err := resolve(h, path, bs); err != nil {
		return nil, err
	}
	if _, err := rt.Bound(ipcLazyEnablePeerAccess); err != nil {
		return nil, err
	}
	return rt, nil
}

// explain is the runtime's gpurt.Runtime.Explain: the library's path, and
// what the driver's version says about a call that found no usable driver
// or device. Without a driver, or with one too old for it, the real
// runtime fails every call that needs the driver (cudaRuntimeGetVersion
// included) with 35 (cudaErrorInsufficientDriver), and
// cudaDriverGetVersion reports 0 or the old version.
func (rt *runtimeAPI) explain(code int) (lib, why string) {
	switch {
	case rt.driverVersion < 0: // cudaDriverGetVersion itself failed: nothing to add
	case rt.driverVersion == 0:
		why = "no CUDA driver is installed (cudaDriverGetVersion reports 0: libcuda.so.1 is missing or cannot be loaded)"
	case code == errInsufficientDriver:
		why = driverTooOld(rt.Path, rt.Version, rt.driverVersion)
	}
	return rt.Path, why
}

// driverTooOld says what a runtime needs of the driver. CUDA's minor
// version compatibility holds within a major version (the real 11.8
// runtime accepts an 11.0 driver and fails with 35 on a 10.2 one), so the
// runtime needs a driver of its own major version or newer. When the
// runtime could not report its version (runtimeVersion 0), the library's
// file name tells it, if it can.
func driverTooOld(path string, runtimeVersion, driverVersion int) string {
	rv, major, from := versionString(runtimeVersion), runtimeVersion/1000, ""
	if runtimeVersion == 0 {
		rv, major = fileVersion(path)
		from = " (runtime version from the file name)"
	}
	if major == 0 || driverVersion/1000 >= major {
		return fmt.Sprintf("the driver supports CUDA %s, older than this runtime needs", versionString(driverVersion))
	}
	return fmt.Sprintf("runtime %s needs a driver for CUDA %d, driver supports %s%s", rv, major, versionString(driverVersion), from)
}

// fileVersion reads a runtime's version from its file name, following
// symlinks: "11.8" and 11 for libcudart.so.11.8.89, "13" and 13 for
// libcudart.so.13 (the soname of every 13.x), "" and 0 when the name says
// nothing (libcudart.so, or another name).
func fileVersion(path string) (string, int) {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	rest, ok := strings.CutPrefix(filepath.Base(path), "libcudart.so.")
	if !ok {
		return "", 0
	}
	parts := strings.Split(rest, ".")
	major, err := strconv.Atoi(parts[0])
	if err != nil || major == 0 {
		return "", 0
	}
	if len(parts) == 3 { // major.minor.patch: the real file, not a soname
		if _, err := strconv.Atoi(parts[1]); err == nil {
			return parts[0] + "." + parts[1], major
		}
	}
	return parts[0], major
}

// checkVersions refuses a runtime older than minRuntimeVersion, a machine
// without a driver (cudaDriverGetVersion reports 0), and a driver of an
// older major version than the runtime. The real runtime fails
// cudaRuntimeGetVersion itself in the last two cases, so these checks
// serve runtimes that report their version anyway.
func checkVersions(path string, runtimeVersion, driverVersion int) error {
	if runtimeVersion < minRuntimeVersion {
		return fmt.Errorf("%w: cuda: %s: runtime %s is older than the minimum, %s",
			driver.ErrBackendUnavailable, path, versionString(runtimeVersion), versionString(minRuntimeVersion))
	}
	if driverVersion == 0 {
		return fmt.Errorf("%w: cuda: %s: runtime %s, but no CUDA driver is installed (cudaDriverGetVersion reports 0)",
			driver.ErrBackendUnavailable, path, versionString(runtimeVersion))
	}
	if driverVersion/1000 < runtimeVersion/1000 {
		return fmt.Errorf("%w: cuda: %s: %s", driver.ErrBackendUnavailable, path, driverTooOld(path, runtimeVersion, driverVersion))
	}
	return nil
}
