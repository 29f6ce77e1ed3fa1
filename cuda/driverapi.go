package cuda

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// Modules and kernel launches go through the CUDA driver API (libcuda):
// the runtime loads no PTX of ours without it (cudaLibraryLoadData is
// 12.0+, and this package accepts 11.4). The driver API acts on the
// calling thread's current context; the driver uses the runtime's primary
// context of its device, retained at the first LoadModule and released at
// Close, so the runtime's streams and pool memory are the module's.
//
// Signatures bound here (cuda.h, CUDA 11.x to 13.x; every function returns
// CUresult, a C enum whose codes agree with cudaError_t's for every code
// this package maps; CUdevice is an int, CUcontext, CUmodule, CUfunction
// and CUstream are pointers, and a CUstream is the runtime's
// cudaStream_t):
//
//	cuInit(unsigned int Flags)                                  // Flags must be 0
//	cuDeviceGet(CUdevice *device, int ordinal)
//	cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
//	cuDevicePrimaryCtxRelease_v2(CUdevice dev)                  // cuda.h 11.0+: #define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
//	cuCtxGetCurrent(CUcontext *pctx)
//	cuCtxSetCurrent(CUcontext ctx)
//	cuModuleLoadData(CUmodule *module, const void *image)       // image: NUL-terminated PTX text
//	cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
//	cuModuleUnload(CUmodule hmod)
//	cuLaunchKernel(CUfunction f, unsigned gridDimX, unsigned gridDimY, unsigned gridDimZ,
//	        unsigned blockDimX, unsigned blockDimY, unsigned blockDimZ,
//	        unsigned sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
//	cuGetErrorString(CUresult error, const char **pStr)         // optional: the message
//	cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
//	        int blockSize, size_t dynamicSMemSize)              // optional: MaxActiveBlocks (driver API reference, Occupancy)
//
// Checked against NVIDIA's driver API reference (cuLaunchKernel: "If f
// has N parameters, then kernelParams needs to be an array of N pointers.
// Each ... must point to a region of memory from which the actual kernel
// parameter will be copied"), cuda-python's driver bindings
// (cuDevicePrimaryCtxRelease_v2, cuInit, cuDeviceGet, cuGetErrorString)
// and docs.rs cuda-driver-sys (cuModuleLoadData, cuDevicePrimaryCtxRetain),
// not against an installed cuda.h: this machine has none.

// DriverLibEnv names the CUDA driver library to take the module and launch
// calls from, instead of libcuda.so.1. The runtime library itself is
// looked in first (a test's fake runtime exports them; the real libcudart
// does not).
const DriverLibEnv = "CAPALLOC_CUDA_DRIVER_LIB"

// driverLib is the driver library's soname, installed with the kernel
// driver in the loader's path.
const driverLib = "libcuda.so.1"

// driverAPI is the driver API bound from one library.
type driverAPI struct {
	rt   *runtimeAPI // for the error text when cuGetErrorString is missing
	path string

	init, deviceGet, ctxRetain, ctxRelease, ctxGetCurrent, ctxSetCurrent gpurt.Sym
	moduleLoadData, moduleGetFunction, moduleUnload, launchKernel        gpurt.Sym
	errorString, occupancy                                               gpurt.Sym // optional

	// Optional: virtual memory (vm.go) is not offered without them.
	memGranularity, memAddressReserve, memAddressFree, memCreate gpurt.Sym
	memRelease, memMap, memUnmap, memSetAccess                   gpurt.Sym
}

func (a *driverAPI) bindings() []gpurt.Binding {
	return []gpurt.Binding{
		gpurt.Required("cuInit", &a.init),
		gpurt.Required("cuDeviceGet", &a.deviceGet),
		gpurt.Required("cuDevicePrimaryCtxRetain", &a.ctxRetain),
		gpurt.Required("cuDevicePrimaryCtxRelease_v2", &a.ctxRelease),
		gpurt.Required("cuCtxGetCurrent", &a.ctxGetCurrent),
		gpurt.Required("cuCtxSetCurrent", &a.ctxSetCurrent),
		gpurt.Required("cuModuleLoadData", &a.moduleLoadData),
		gpurt.Required("cuModuleGetFunction", &a.moduleGetFunction),
		gpurt.Required("cuModuleUnload", &a.moduleUnload),
		gpurt.Required("cuLaunchKernel", &a.launchKernel),
		gpurt.Optional("cuGetErrorString", &a.errorString),
		gpurt.Optional("cuOccupancyMaxActiveBlocksPerMultiprocessor", &a.occupancy),
		gpurt.Optional("cuMemGetAllocationGranularity", &a.memGranularity),
		gpurt.Optional("cuMemAddressReserve", &a.memAddressReserve),
		gpurt.Optional("cuMemAddressFree", &a.memAddressFree),
		gpurt.Optional("cuMemCreate", &a.memCreate),
		gpurt.Optional("cuMemRelease", &a.memRelease),
		gpurt.Optional("cuMemMap", &a.memMap),
		gpurt.Optional("cuMemUnmap", &a.memUnmap),
		gpurt.Optional("cuMemSetAccess", &a.memSetAccess),
	}
}

// driver binds the driver API once per runtime library: from the runtime
// library's own handle if it has every call, else from $DriverLibEnv if
// set, else from libcuda.so.1. None is driver.ErrBackendUnavailable naming
// each library tried and what it lacked; a later call tries again.
func (rt *runtimeAPI) driver(getenv func(string) string) (*driverAPI, error) {
	rt.drvMu.Lock()
	defer rt.drvMu.Unlock()
	if rt.drv != nil {
		return rt.drv, nil
	}
	var tried []string
	bind := func(path string, h uintptr) *driverAPI {
		a := &driverAPI{rt: rt, path: path}
		if err := vendor.Resolve(h, path, a.bindings()); err != nil {
			tried = append(tried, strings.TrimPrefix(err.Error(), driver.ErrBackendUnavailable.Error()+": cuda: "))
			return nil
		}
		return a
	}
	a := bind(rt.Path, rt.handle)
	lib := driverLib
	if p := strings.TrimSpace(getenv(DriverLibEnv)); p != "" {
		lib = p
	}
	if a == nil {
		if h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL); err != nil {
			msg := err.Error()
			if !strings.HasPrefix(msg, lib) {
				msg = lib + ": " + msg
			}
			tried = append(tried, msg)
		} else {
			a = bind(lib, h)
		}
	}
	if a == nil {
		return nil, fmt.Errorf("%w: cuda: no CUDA driver API for modules and kernel launches (set %s to libcuda's path); tried:\n  %s",
			driver.ErrBackendUnavailable, DriverLibEnv, strings.Join(tried, "\n  "))
	}
	rt.drv = a
	return a, nil
}

// check is the typed error of a driver API call (nil for 0): a cuda
// *Error, its text from cuGetErrorString (or, without it, the runtime's
// text for the same code).
func (a *driverAPI) check(op, call string, code int32) error {
	if code == 0 {
		return nil
	}
	return a.rt.Error(op, call, code, a.text(code), nil)
}

func (a *driverAPI) text(code int32) string {
	if a.errorString.Addr != 0 {
		var p *byte
		if gpurt.Call(a.errorString.Addr, uintptr(code), uintptr(unsafe.Pointer(&p))) == 0 && p != nil {
			n := 0
			for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
				n++
			}
			return string(unsafe.Slice(p, n))
		}
	}
	return a.rt.Text(code)
}

// primary binds the driver API, initializes it and retains the runtime's
// primary context of this device, for the module calls and for virtual
// memory (each retains it once and releases it at Close, through
// release). It runs on the dev thread.
func (d *Driver) primary() (a *driverAPI, ctx uintptr, release func() error, err error) {
	if a, err = d.rt.driver(os.Getenv); err != nil {
		return nil, 0, nil, err
	}
	if err := a.check("initialize the driver API", a.init.Name, gpurt.Call(a.init.Addr, 0)); err != nil {
		return nil, 0, nil, err
	}
	var dev int32
	if err := a.check(fmt.Sprintf("get device %d", d.opts.Device), a.deviceGet.Name,
		gpurt.Call(a.deviceGet.Addr, uintptr(unsafe.Pointer(&dev)), uintptr(d.opts.Device))); err != nil {
		return nil, 0, nil, err
	}
	if err := a.check(fmt.Sprintf("retain the primary context of device %d", d.opts.Device), a.ctxRetain.Name,
		gpurt.Call(a.ctxRetain.Addr, uintptr(unsafe.Pointer(&ctx)), uintptr(dev))); err != nil {
		return nil, 0, nil, err
	}
	release = func() error {
		return a.check("close: release the primary context", a.ctxRelease.Name, gpurt.Call(a.ctxRelease.Addr, uintptr(dev)))
	}
	return a, ctx, release, nil
}

// kernels is the driver's gpurt.Config.Kernels: the driver API on the
// runtime's primary context of this device. It runs on the dev thread.
func (d *Driver) kernels(*gpurt.Setup) (*gpurt.KernelAPI, error) {
	a, ctx, release, err := d.primary()
	if err != nil {
		return nil, err
	}
	return &gpurt.KernelAPI{
		ModuleLoadData: a.moduleLoadData, ModuleGetFunction: a.moduleGetFunction,
		ModuleUnload: a.moduleUnload, LaunchKernel: a.launchKernel, Occupancy: a.occupancy,
		GetCurrent: a.ctxGetCurrent, SetCurrent: a.ctxSetCurrent, Current: ctx,
		Check:   a.check,
		Image:   ptxImage,
		TimerHz: globalTimerHz,
		Release: release,
	}, nil
}

// ptxImage is the module's PTX, NUL-terminated as cuModuleLoadData reads
// it.
func ptxImage(img driver.ModuleImage) ([]byte, error) {
	ptx := img.PTX
	if len(bytes.TrimRight(ptx, "\x00")) == 0 {
		return nil, errf(driver.ErrInvalidValue, "load module %s: the image has no PTX", img.Name)
	}
	if ptx[len(ptx)-1] != 0 {
		ptx = append(ptx[:len(ptx):len(ptx)], 0)
	}
	return ptx, nil
}
