package gpurt

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Device code: module load and kernel launch (driver.KernelLauncher)
//
// Both runtimes load a module and launch its kernels with calls of one
// shape, from the vendor's KernelAPI: module load from an image in memory,
// get function by name, module unload, and the launch (function, grid
// x/y/z, block x/y/z, dynamic shared bytes, stream, void **kernelParams,
// void **extra). What differs stays in the vendor package: where the
// calls come from (CUDA's driver API in libcuda.so.1; HIP's runtime),
// what the image is (the PTX; hiprtc's code object for the device's
// architecture), the per-thread state a launch needs (CUDA: the runtime's
// primary context current; HIP: the device), the timer's rate, and the
// errors.
//
// LoadModule is device-wide and unsafe: it runs under driver.DeviceWide (a
// Global-mode capture anywhere in the process refuses it before any call)
// on the dev thread, with the vendor's state made current there. Modules
// stay loaded until Close, which unloads them on the dev thread.
//
// LaunchKernel is stream-ordered and hot: it runs on the caller's
// goroutine (several ranks share one driver, and a launch must not queue
// behind another rank's on one thread), with its OS thread locked while
// the vendor's state is made current, the kernel launched and the
// thread's previous state put back. It allocates nothing: the parameter is
// copied into a pooled heap block that kernelParams points at (the
// runtimes copy the parameter at the call, into the launch or into the
// captured kernel node), and the calls go through CallHot.

// KernelAPI is what a vendor gives for LoadModule and LaunchKernel, built
// on the dev thread at the first LoadModule (Config.Kernels).
type KernelAPI struct {
	// The module calls, each returning the vendor's error code:
	// load(module *out, const void *image),
	// get function(function *out, module, const char *name),
	// unload(module), and the launch described above.
	ModuleLoadData, ModuleGetFunction, ModuleUnload, LaunchKernel Sym
	// Occupancy, optional (Addr 0: MaxActiveBlocks is unsupported):
	// occupancy(int *numBlocks, function, int blockSize, size_t
	// dynamicSharedBytes), the same shape in both runtimes.
	Occupancy Sym
	// GetCurrent(T *out) and SetCurrent(T) read and set the calling
	// thread's state a launch and a load need, and Current is the value
	// this driver needs (CUDA: cuCtxGetCurrent/cuCtxSetCurrent and the
	// primary context; HIP: hipGetDevice/hipSetDevice and the ordinal).
	GetCurrent, SetCurrent Sym
	Current                uintptr
	// Check is the typed error of a code from these calls (nil for 0).
	Check func(op, call string, code int32) error
	// Image gives the bytes the load call takes for img: cuda's PTX,
	// NUL-terminated; hip's code object, compiled for the device. It runs
	// on the dev thread.
	Image func(img driver.ModuleImage) ([]byte, error)
	// TimerHz is the rate of the kernels' global timer (driver.Module).
	TimerHz uint64
	// Release, when set, runs at Close on the dev thread after the
	// modules are unloaded (cuda: releases the retained primary context).
	Release func() error
}

// MaxParamBytes bounds a kernel's parameter block: 4 KiB, CUDA's limit for
// __global__ parameters before 12.1 (and larger since), which HIP shares.
// The kernels here take one struct of at most 56 bytes.
const MaxParamBytes = 4096

// kernelInfo is what a launch checks of a kernel handle.
type kernelInfo struct {
	maxThreads uint32
}

// modulesState is the driver's loaded modules and its KernelAPI, touched
// only on the dev thread.
type modulesState struct {
	api  *KernelAPI
	mods []uintptr
}

// checkImage refuses an image that names no kernel, or a name twice.
func (d *Driver) checkImage(op string, img driver.ModuleImage) error {
	if len(img.Kernels) == 0 {
		return d.v.Errf(driver.ErrInvalidValue, "%s: the image names no kernel", op)
	}
	seen := map[string]bool{}
	for _, k := range img.Kernels {
		if k == "" || seen[k] {
			return d.v.Errf(driver.ErrInvalidValue, "%s: kernel name %q empty or repeated", op, k)
		}
		seen[k] = true
	}
	return nil
}

// LoadModule is driver.KernelLauncher's: it loads img on the driver's
// device, looks up every kernel it names and reports what a launch
// configuration needs of the device. The module stays loaded until Close.
// It is device-wide and unsafe: while a Global-mode capture is active in
// the process it makes no call and fails with an error wrapping
// driver.ErrCaptureIllegalOp. A runtime that cannot load modules (no CUDA
// driver library, no hiprtc) fails with driver.ErrBackendUnavailable saying
// why; the rest of the driver keeps working. A kernel the image lacks
// fails the load, with nothing left loaded.
func (d *Driver) LoadModule(img driver.ModuleImage) (*driver.Module, error) {
	name := img.Name
	if name == "" {
		name = "module"
	}
	op := "load module " + name
	if d.closed.Load() {
		return nil, d.v.ErrClosed(op)
	}
	if d.kernelsHook == nil {
		return nil, d.v.Errf(driver.ErrBackendUnavailable, "%s: this driver cannot load modules", op)
	}
	if err := d.checkImage(op, img); err != nil {
		return nil, err
	}
	var m *driver.Module
	err := driver.DeviceWide(d.v.Name, d.v.Name+": "+op, func() error {
		return d.dev.Do(op, func() error {
			var err error
			m, err = d.loadModule(op, img)
			return err
		})
	})
	return m, err
}

// loadModule runs on the dev thread.
func (d *Driver) loadModule(op string, img driver.ModuleImage) (*driver.Module, error) {
	if d.closed.Load() { // Close's teardown has run or is queued behind us: load nothing it would miss
		return nil, d.v.ErrClosed(op)
	}
	api := d.modules.api
	if api == nil {
		var err error
		if api, err = d.kernelsHook(&Setup{RT: d.rt, Opts: d.opts, d: d}); err != nil {
			return nil, err
		}
		d.modules.api = api
		d.kapi.Store(api)
	}
	maxThreads, err := d.attribute(op, "max threads per block", d.v.DevAttrMaxThreadsPerBlock)
	if err != nil {
		return nil, err
	}
	sms, err := d.attribute(op, "multiprocessors", d.v.DevAttrMultiprocessorCount)
	if err != nil {
		return nil, err
	}
	image, err := api.Image(img)
	if err != nil {
		return nil, err
	}
	if len(image) == 0 {
		return nil, d.v.Errf(driver.ErrInvalidValue, "%s: empty image", op)
	}
	if err := api.Check(op, api.SetCurrent.Name, Call(api.SetCurrent.Addr, api.Current)); err != nil {
		return nil, err
	}
	var mod uintptr
	code := Call(api.ModuleLoadData.Addr, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&image[0])))
	runtime.KeepAlive(image)
	if err := api.Check(fmt.Sprintf("%s (%d B)", op, len(image)), api.ModuleLoadData.Name, code); err != nil {
		return nil, err
	}
	m := &driver.Module{Kernels: make(map[string]driver.Kernel, len(img.Kernels)), MaxThreadsPerBlock: maxThreads, Multiprocessors: sms, TimerHz: api.TimerHz,
		Device: d.opts.Device, DeviceID: d.pciBusID()}
	for _, k := range img.Kernels {
		cname := append([]byte(k), 0)
		var fn uintptr
		code := Call(api.ModuleGetFunction.Addr, uintptr(unsafe.Pointer(&fn)), mod, uintptr(unsafe.Pointer(&cname[0])))
		if err := api.Check(op+": kernel "+k, api.ModuleGetFunction.Name, code); err != nil {
			_ = api.Check(op+": unload", api.ModuleUnload.Name, Call(api.ModuleUnload.Addr, mod))
			return nil, err
		}
		m.Kernels[k] = driver.Kernel(fn)
	}
	d.modules.mods = append(d.modules.mods, mod)
	d.mu.Lock()
	ks := maps.Clone(*d.kernels.Load())
	for _, fn := range m.Kernels {
		ks[fn] = kernelInfo{maxThreads: uint32(maxThreads)}
	}
	d.kernels.Store(&ks)
	d.mu.Unlock()
	return m, nil
}

// attribute reads a device attribute of the driver's device (dev thread).
func (d *Driver) attribute(op, what string, attr uintptr) (int, error) {
	var v int32
	if err := d.rt.Check(op+": "+what, d.rt.DeviceGetAttribute.Name,
		Call(d.rt.DeviceGetAttribute.Addr, uintptr(unsafe.Pointer(&v)), attr, uintptr(d.opts.Device))); err != nil {
		return 0, err
	}
	if v <= 0 {
		return 0, d.v.Errf(driver.ErrDriver, "%s: %s reported %s %d", op, d.rt.DeviceGetAttribute.Name, what, v)
	}
	return int(v), nil
}

// unloadModules runs in Close's teardown, on the dev thread.
func (d *Driver) unloadModules() error {
	api := d.modules.api
	if api == nil {
		return nil
	}
	var first error
	for _, mod := range d.modules.mods {
		if err := api.Check("close: unload module", api.ModuleUnload.Name, Call(api.ModuleUnload.Addr, mod)); err != nil && first == nil {
			first = err
		}
	}
	d.modules.mods = nil
	if api.Release != nil {
		if err := api.Release(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// launchParams is the heap block kernelParams points at: argv[0] is the
// address of params, which holds a copy of the caller's parameter.
type launchParams struct {
	argv   [1]uintptr
	params [MaxParamBytes]byte // at offset 8: 8-byte aligned, as the kernels' structs are
}

var launchBlocks = sync.Pool{New: func() any { return new(launchParams) }}

// LaunchKernel is driver.KernelLauncher's: kernel k of a module this driver
// loaded, on a 1-D grid of grid blocks of block threads, with params (the
// kernel's one by-value parameter, copied at the call) on s. On a
// capturing stream it becomes a kernel node that every launch of the
// graph runs. It runs on the calling goroutine and allocates nothing. An
// unknown kernel or stream, grid or block 0, a block over the device's
// maximum, a grid of 2^32 threads or more, or a parameter block empty or
// over MaxParamBytes fail with driver.ErrInvalidValue, and a closed driver
// with driver.ErrClosed, before any call.
func (d *Driver) LaunchKernel(k driver.Kernel, grid, block uint32, params []byte, s driver.Stream) error {
	const op = "launch kernel"
	if err := d.checkStream(op, s); err != nil {
		return err
	}
	info, ok := (*d.kernels.Load())[k]
	if !ok {
		return d.v.Errf(driver.ErrInvalidValue, "%s: unknown kernel %#x (not from this driver's LoadModule)", op, uint64(k))
	}
	if grid == 0 || block == 0 || block > info.maxThreads || uint64(grid)*uint64(block) > math.MaxUint32 {
		return d.v.Errf(driver.ErrInvalidValue, "%s %#x: grid %d x block %d (blocks of 1 to %d threads, fewer than 2^32 in all)", op, uint64(k), grid, block, info.maxThreads)
	}
	if len(params) == 0 || len(params) > MaxParamBytes {
		return d.v.Errf(driver.ErrInvalidValue, "%s %#x: parameter of %d B (1 to %d B)", op, uint64(k), len(params), MaxParamBytes)
	}
	api := d.kapi.Load()
	p := launchBlocks.Get().(*launchParams)
	copy(p.params[:], params)
	p.argv[0] = uintptr(unsafe.Pointer(&p.params[0]))
	runtime.LockOSThread()
	call, code := api.withCurrent(func() int32 {
		return First(CallHot(api.LaunchKernel.Addr, uintptr(k), uintptr(grid), 1, 1, uintptr(block), 1, 1, 0, uintptr(s),
			uintptr(unsafe.Pointer(&p.argv[0])), 0))
	})
	runtime.UnlockOSThread()
	launchBlocks.Put(p)
	if code != 0 {
		return api.Check(fmt.Sprintf("%s %#x (grid %d, block %d, stream %#x)", op, uint64(k), grid, block, uint64(s)), call, code)
	}
	return nil
}

// withCurrent runs fn, a runtime call, with the driver's state current on
// the calling thread (locked by the caller) and puts the thread's previous
// state back after it. It returns the name of the call that failed, and
// its code.
func (a *KernelAPI) withCurrent(fn func() int32) (string, int32) {
	code, prev := CallHot(a.GetCurrent.Addr, OutArg)
	if code != 0 {
		return a.GetCurrent.Name, code
	}
	if uintptr(prev) == a.Current {
		return a.LaunchKernel.Name, fn()
	}
	if code := First(CallHot(a.SetCurrent.Addr, a.Current)); code != 0 {
		return a.SetCurrent.Name, code
	}
	code = fn()
	if back := First(CallHot(a.SetCurrent.Addr, uintptr(prev))); code == 0 && back != 0 {
		return a.SetCurrent.Name, back
	}
	return a.LaunchKernel.Name, code
}
