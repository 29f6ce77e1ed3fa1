// Package hip is the driver.Driver for AMD GPUs, bound to the HIP runtime
// (libamdhip64) at run time through purego: no cgo, so it builds with
// CGO_ENABLED=0 for linux/amd64 and linux/arm64, and a machine without
// ROCm or without a GPU gets an error wrapping driver.ErrBackendUnavailable
// that says what was searched and found, never a crash. It mirrors the
// cuda package. Nothing here has run on an AMD GPU yet: it is proven
// against a fake runtime and against the real library on a machine
// without a GPU. See docs/hip-backend.md.
package hip

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// Alignment is the alignment this driver reports for device allocations:
// 256 bytes, what CUDA guarantees. That ROCm's pool allocations are
// aligned at least as much is an assumption, not yet checked on an AMD GPU
// (docs/hip-backend.md lists it).
const Alignment int64 = 256

// DefaultReleaseThreshold keeps every byte the pool has reserved
// (hipMemPoolAttrReleaseThreshold is a uint64_t; UINT64_MAX means "never
// trim at synchronize"), as the cuda driver does.
const DefaultReleaseThreshold = gpurt.DefaultReleaseThreshold

// The capture domain is "hip", one per process (vendor.Name): Global-mode
// captures are process wide.

// Options configures a Driver. The fields it shares with cuda.Options
// mean what they mean there (documented on internal/gpurt's Options, with
// the HIP calls named); NoCapture and Compile are HIP's own. The zero value
// is device 0, a dedicated pool that never trims, default-priority
// non-blocking streams, capture on.
type Options struct {
	Device           int   // the HIP device ordinal
	ReleaseThreshold int64 // hipMemPoolAttrReleaseThreshold; 0: DefaultReleaseThreshold
	Reserve          int64 // allocated and freed once at New; at most ReleaseThreshold
	DefaultPool      bool  // hipDeviceGetDefaultMemPool's pool
	StreamPriority   int   // hipStreamCreateWithPriority's priority
	Blocking         bool  // streams without hipStreamNonBlocking (see cuda's Options.Blocking)
	// NoCapture gives up graph capture: BeginCapture fails with
	// driver.ErrCaptureUnavailable and makes no call. It is the only way to
	// open a runtime older than 5.6, which cannot capture pool allocations
	// (in 5.2.3 hipMallocAsync inside a capture allocates at once).
	NoCapture     bool
	IPC           bool                 // the pool created with hipMemHandleTypePosixFileDescriptor, exportable
	CaptureSafety driver.CaptureSafety // overrides the device's classification
	HostMemory    driver.HostMemory    // HostAlloc's memory, pinned with hipHostRegister
	// Compile, when set, replaces hiprtc in LoadModule: it turns the
	// module's source into a code object for the device's gcnArchName (a
	// compiler of the engine's own, or code objects built ahead of time for
	// an architecture the installed hiprtc cannot compile).
	Compile Compiler
}

// core is the shared runtime layer's options for o.
func (o Options) core() gpurt.Options {
	return gpurt.Options{
		Device: o.Device, ReleaseThreshold: o.ReleaseThreshold, Reserve: o.Reserve, DefaultPool: o.DefaultPool,
		StreamPriority: o.StreamPriority, Blocking: o.Blocking, HostMemory: o.HostMemory, IPC: o.IPC,
		CaptureSafety: o.CaptureSafety,
	}
}

// core is the shared driver (internal/gpurt), embedded under an unexported
// name: its exported methods are Driver's.
type core = gpurt.Driver

// Driver is one HIP device: the driver.Driver, with the optional
// interfaces driver.GraphMemTrimmer, driver.PoolTrimmer,
// driver.HostFuncLauncher, driver.IPCMemory, driver.StreamIdler and
// driver.KernelLauncher (hiprtc and the module calls: module.go). Every
// method is safe for concurrent use. The methods are internal/gpurt's,
// shared with the cuda package; this package binds them to libamdhip64
// (symbols.go, abi.go, errors.go) and adds what only HIP has: the 5.6
// capture gate (no_capture), the pools attribute that is only a warning.
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
// Runtime (path and HIP version).
type Driver struct {
	*core
	rt   *runtimeAPI
	opts Options
}

var _ gpurt.Interfaces = (*Driver)(nil)

// New loads the HIP runtime and opens a device. Without a usable runtime
// or device, or with a runtime older than 5.6 unless opts.NoCapture, the
// error wraps driver.ErrBackendUnavailable and says what was searched or
// found; bad options wrap driver.ErrInvalidValue.
//
// Opening makes device-wide calls (hipSetDevice, hipMemGetInfo, pool
// creation, the reserve's synchronize), so New runs under alloc's guard
// for the "hip" capture domain: while a Global-mode capture is active
// anywhere in the process it makes no driver call and fails with an error
// wrapping driver.ErrCaptureIllegalOp; retry after the capture ends.
func New(opts Options) (*Driver, error) {
	d := &Driver{opts: opts}
	c, err := gpurt.Open(gpurt.Config{
		Vendor: &vendor,
		Opts:   opts.core(),
		Load: gpurt.Keep(&d.rt, func() (*runtimeAPI, error) {
			return loader.Load(os.Getenv, func(rt *runtimeAPI) error { return checkCaptureVersion(rt, opts.NoCapture) })
		}),
		CheckDevice: d.checkDevice,
		Describe:    d.describe,
		CaptureGate: d.captureGate,
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

// captureGate refuses every capture of a driver opened with
// Options.NoCapture (the only way to use a runtime older than 5.6), with
// driver.ErrCaptureUnavailable and no call made: such a runtime would
// allocate at once inside the capture, and the graph would not own the
// memory.
func (d *Driver) captureGate(op string) error {
	if d.opts.NoCapture {
		return errf(driver.ErrCaptureUnavailable, "%s: opened with no_capture (HIP runtime %s; capture with pools needs %s)",
			op, versionString(d.rt.Version), versionString(minCaptureVersion))
	}
	return nil
}

// checkDevice refuses a device ordinal the runtime did not report, as
// unavailable (a fallback chain moves on). The count is the loader's one
// probe: hipGetDeviceCount is not called again.
//
// hipDeviceAttributeMemoryPoolsSupported is read but does not refuse the
// device on its own: ROCm 5.6 to 6.1 report it false by default although
// pools work. A device that really lacks pools fails at pool creation
// (hipMemPoolCreate), with that call's code.
func (d *Driver) checkDevice(s *gpurt.Setup) error {
	rt, dev := d.rt, d.opts.Device
	if dev >= rt.devices {
		return errf(driver.ErrBackendUnavailable, "device %d requested, %d present (%s, HIP runtime %s)", dev, rt.devices, rt.Path, versionString(rt.Version))
	}
	var pools int32
	if err := rt.Check("query memory pool support", "hipDeviceGetAttribute",
		gpurt.Call(rt.DeviceGetAttribute.Addr, uintptr(unsafe.Pointer(&pools)), devAttrMemoryPoolsSupported, uintptr(dev))); err != nil {
		return err
	}
	if pools == 0 {
		s.Warn("device %d reports hipDeviceAttributeMemoryPoolsSupported = 0 (ROCm 5.6-6.1 report 0 by default although pools work); trying the pool anyway", dev)
	}
	return nil
}

// describe runs on the dev thread at open: the device's name and total
// memory. The total is hipMemGetInfo's; when that fails or reports 0, or
// under-reports an integrated (APU) device's memory, hipDeviceTotalMem's
// answer is used instead and Warnings says so (gpurt.Setup.TotalMemory).
// Only when neither answers is open refused.
func (d *Driver) describe(s *gpurt.Setup, integrated bool) (string, uint64, error) {
	total, err := s.TotalMemory(integrated, "hipDeviceTotalMem", func() uint64 {
		var devTotal uint64
		if gpurt.Call(d.rt.deviceTotalMem.Addr, uintptr(unsafe.Pointer(&devTotal)), uintptr(d.opts.Device)) != 0 {
			devTotal = 0
		}
		return devTotal
	})
	if err != nil {
		return "", 0, err
	}
	return fmt.Sprintf("hip:%d %s (HIP runtime %s)", d.opts.Device, d.deviceName(), versionString(d.rt.Version)), total, nil
}

// deviceName is hipDeviceGetName's answer, or "" when it fails.
func (d *Driver) deviceName() string {
	buf := make([]byte, deviceNameLen)
	if gpurt.Call(d.rt.deviceGetName.Addr, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d.opts.Device)) != 0 {
		return ""
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i])
		}
	}
	return string(buf)
}

// Runtime reports the loaded library and its version
// (major*10^7 + minor*10^5 + patch), for logs.
func (d *Driver) Runtime() (path string, runtimeVersion int) {
	return d.rt.Path, d.rt.Version
}
