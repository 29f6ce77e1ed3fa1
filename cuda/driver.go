// Package cuda is the driver.Driver for NVIDIA GPUs, bound to the CUDA
// runtime (libcudart) at run time through purego: no cgo, so it builds with
// CGO_ENABLED=0 for linux/amd64 and linux/arm64, and a machine without CUDA
// gets an error wrapping driver.ErrBackendUnavailable that says what was
// searched, never a crash. See docs/cuda-backend.md.
package cuda

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// Alignment is the guaranteed alignment of device allocations: the CUDA
// programming guide states every address returned by the runtime's
// allocation routines is aligned to at least 256 bytes.
const Alignment int64 = 256

// DefaultReleaseThreshold keeps every byte the pool has reserved (the
// pool's threshold is a cuuint64_t; UINT64_MAX means "never trim at
// synchronize"). CUDA's own default of 0 returns memory to the OS at every
// synchronize, which on GB10's unified memory stalls the process.
const DefaultReleaseThreshold = gpurt.DefaultReleaseThreshold

// The capture domain is "cuda", one per process (vendor.Name): every CUDA
// context in the process sees every Global-mode capture, whichever Driver
// started it.

// Options configures a Driver: the options both GPU drivers take, each
// field documented in internal/gpurt (go doc
// github.com/capalloc/capalloc/internal/gpurt Options): Device (the CUDA
// device ordinal), ReleaseThreshold, Reserve, DefaultPool, StreamPriority,
// Blocking (read it before asking for blocking streams: they break
// captures), HostMemory, IPC and CaptureSafety. The zero value is device
// 0, a dedicated pool that never trims, default-priority non-blocking
// streams.
type Options = gpurt.Options

// core is the shared driver (internal/gpurt), embedded under an unexported
// name: its exported methods are Driver's.
type core = gpurt.Driver

// Driver is one CUDA device: the driver.Driver, with the optional
// interfaces driver.GraphMemTrimmer, driver.PoolTrimmer,
// driver.HostFuncLauncher, driver.IPCMemory, driver.StreamIdler and
// driver.KernelLauncher (modules and launches through the CUDA driver API:
// driverapi.go). Every
// method is safe for concurrent use. The methods are internal/gpurt's,
// shared with the hip package; this package binds them to libcudart
// (symbols.go, abi.go, errors.go) and adds what only CUDA has.
//
// Its methods come from the embedded *gpurt.Driver (go doc does not list
// them here): the driver.Driver methods (Name, Info, CaptureDomain, Close,
// CreateStream, DestroyStream, StreamSynchronize, StreamQuery,
// StreamCaptureStatus, Malloc, Free, MallocAsync, FreeAsync, HostAlloc,
// HostFree, the copies and MemsetAsync, BeginCapture, EndCapture,
// GraphInstantiate, GraphLaunch, GraphExecDestroy, GraphDestroy),
// StreamIdle, TrimGraphMemory, TrimPool, LaunchHostFunc, LoadModule,
// LaunchKernel, IPCGetMemHandle, IPCOpenMemHandle, IPCCloseMemHandle,
// ExportPool, ExportPointer, ImportPool, OnDevice, WaitClosed and
// Warnings, each documented in internal/gpurt; this package adds New and
// Runtime (path, runtime and driver versions).
type Driver struct {
	*core
	rt   *runtimeAPI
	opts Options
}

var _ gpurt.Interfaces = (*Driver)(nil)

// New loads the CUDA runtime and opens a device. Without a usable runtime,
// driver or device the error wraps driver.ErrBackendUnavailable and says
// what was searched or found; bad options wrap driver.ErrInvalidValue.
//
// Opening makes device-wide calls (cudaSetDevice, cudaMemGetInfo, pool
// creation, the reserve's synchronize) that would invalidate a Global-mode
// capture, or hang on GB10. So New runs under alloc's guard for the "cuda"
// capture domain: while a Global-mode capture is active anywhere in the
// process it makes no driver call and fails with an error wrapping
// driver.ErrCaptureIllegalOp; retry after the capture ends.
func New(opts Options) (*Driver, error) {
	d := &Driver{opts: opts}
	c, err := gpurt.Open(gpurt.Config{
		Vendor: &vendor,
		Opts:   opts,
		Load: gpurt.Keep(&d.rt, func() (*runtimeAPI, error) {
			return loader.Load(os.Getenv, nil)
		}),
		CheckDevice: d.checkDevice,
		Describe:    d.describe,
		Kernels:     d.kernels,
		// Virtual memory: vm.go.
		VirtualMemory: d.virtualMemory,
	})
	if err != nil {
		return nil, err
	}
	d.core = c
	return d, nil
}

// checkDevice refuses a machine without the device or without memory pool
// support, as unavailable: a fallback chain moves on to the next backend.
func (d *Driver) checkDevice(*gpurt.Setup) error {
	rt, dev := d.rt, d.opts.Device
	var n int32
	if err := rt.Check("count devices", "cudaGetDeviceCount", gpurt.Call(rt.GetDeviceCount.Addr, uintptr(unsafe.Pointer(&n)))); err != nil {
		return err
	}
	if dev >= int(n) {
		return errf(driver.ErrBackendUnavailable, "device %d requested, %d present (%s)", dev, n, rt.Path)
	}
	var pools int32
	if err := rt.Check("query memory pool support", "cudaDeviceGetAttribute",
		gpurt.Call(rt.DeviceGetAttribute.Addr, uintptr(unsafe.Pointer(&pools)), devAttrMemoryPoolsSupported, uintptr(dev))); err != nil {
		return err
	}
	if pools == 0 {
		return errf(driver.ErrBackendUnavailable, "device %d does not support stream-ordered memory pools (cudaDevAttrMemoryPoolsSupported = 0)", dev)
	}
	return nil
}

// describe runs on the dev thread at open: the device's name and total
// memory. The total is cudaMemGetInfo's, which has been reported to fail
// or under-report on unified-memory GB10. Neither is fatal: a failure (or
// a total of 0) falls back to cudaDeviceProp.totalGlobalMem, and on an
// integrated device the larger of the two is used; either case is
// recorded in Warnings (gpurt.Setup.TotalMemory). Only when neither source
// answers is open refused.
func (d *Driver) describe(s *gpurt.Setup, integrated bool) (string, uint64, error) {
	rt := d.rt
	name, propTotal := d.deviceProps()
	total, err := s.TotalMemory(integrated, "cudaDeviceProp.totalGlobalMem", func() uint64 { return propTotal })
	if err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("cuda:%d %s (runtime %s, driver %s)", d.opts.Device, name, versionString(rt.Version), versionString(rt.driverVersion)), total, nil
}

// deviceProps reads cudaDeviceProp.name and .totalGlobalMem, or "" and 0
// without the optional symbol or when the call fails.
func (d *Driver) deviceProps() (name string, totalGlobalMem uint64) {
	if d.rt.getDeviceProperties.Addr == 0 {
		return "", 0
	}
	buf := make([]byte, devicePropsBufSize)
	if gpurt.Call(d.rt.getDeviceProperties.Addr, uintptr(unsafe.Pointer(&buf[0])), uintptr(d.opts.Device)) != 0 {
		return "", 0
	}
	totalGlobalMem = *(*uint64)(unsafe.Pointer(&buf[devicePropTotalGlobalMemAt]))
	raw := buf[:deviceNameLen]
	for i, c := range raw {
		if c == 0 {
			return string(raw[:i]), totalGlobalMem
		}
	}
	return string(raw), totalGlobalMem
}

// Runtime reports the loaded library and its versions, for logs.
func (d *Driver) Runtime() (path string, runtimeVersion, driverVersion int) {
	return d.rt.Path, d.rt.Version, d.rt.driverVersion
}
