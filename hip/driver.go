// Package hip is the alloc.Driver for AMD GPUs, bound to the HIP runtime
// (libamdhip64) at run time through purego: no cgo, so it builds with
// CGO_ENABLED=0 for linux/amd64 and linux/arm64, and a machine without
// ROCm or without a GPU gets an error wrapping alloc.ErrBackendUnavailable
// that says what was searched and found, never a crash. It mirrors the
// cuda package. Nothing here has run on an AMD GPU yet: it is proven
// against a fake runtime and against the real library on a machine
// without a GPU. See docs/hip-backend.md.
package hip

import (
	"context"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// Alignment is the alignment this driver reports for device allocations:
// 256 bytes, what CUDA guarantees. That ROCm's pool allocations are
// aligned at least as much is an assumption, not yet checked on an AMD GPU
// (docs/hip-backend.md lists it).
const Alignment int64 = 256

// DefaultReleaseThreshold keeps every byte the pool has reserved
// (hipMemPoolAttrReleaseThreshold is a uint64_t; UINT64_MAX means "never
// trim at synchronize"), as the cuda driver does.
const DefaultReleaseThreshold uint64 = math.MaxUint64

// captureDomain is one per process: Global-mode captures are process wide.
const captureDomain = "hip"

// Options configures a Driver. The zero value is device 0, a dedicated pool
// that never trims, default-priority non-blocking streams, capture on.
type Options struct {
	// Device is the HIP device ordinal.
	Device int
	// ReleaseThreshold is the pool's hipMemPoolAttrReleaseThreshold in
	// bytes: memory above it is returned to the OS at synchronize. 0 means
	// DefaultReleaseThreshold; there is deliberately no way to ask for 0.
	ReleaseThreshold int64
	// Reserve is allocated and freed once at New, so the pool holds that
	// much from the start. It must not exceed ReleaseThreshold.
	Reserve int64
	// DefaultPool uses the device's default pool
	// (hipDeviceGetDefaultMemPool) instead of a pool of this driver's own.
	DefaultPool bool
	// StreamPriority is passed to hipStreamCreateWithPriority (lower is
	// higher priority).
	StreamPriority int
	// Blocking creates streams without hipStreamNonBlocking, so they
	// synchronize implicitly with the null stream; see the cuda package's
	// Options.Blocking for what that costs a capture.
	Blocking bool
	// NoCapture gives up graph capture: BeginCapture fails with
	// alloc.ErrCaptureUnavailable and makes no call. It is the only way to
	// open a runtime older than 5.6, which cannot capture pool allocations
	// (in 5.2.3 hipMallocAsync inside a capture allocates at once).
	NoCapture bool
	// IPC creates the driver's pool with hipMemHandleTypePosixFileDescriptor
	// so it can be exported (ExportPool). Not with DefaultPool.
	IPC bool
	// HostMemory, when set, supplies HostAlloc's memory, which the driver
	// pins with hipHostRegister instead of allocating with hipHostMalloc
	// (the plugin server's shared memory).
	HostMemory backends.HostMemory
}

func (o Options) validate() error {
	switch {
	case o.Device < 0:
		return errf(alloc.ErrInvalidValue, "device ordinal %d is negative", o.Device)
	case o.ReleaseThreshold < 0:
		return errf(alloc.ErrInvalidValue, "release threshold %d B is negative", o.ReleaseThreshold)
	case o.Reserve < 0:
		return errf(alloc.ErrInvalidValue, "reserve %d B is negative", o.Reserve)
	case o.Reserve > 0 && o.ReleaseThreshold > 0 && o.Reserve > o.ReleaseThreshold:
		return errf(alloc.ErrInvalidValue, "reserve %d B exceeds release threshold %d B: the pool would return it at the first synchronize",
			o.Reserve, o.ReleaseThreshold)
	case o.IPC && o.DefaultPool:
		return errf(alloc.ErrInvalidValue, "ipc needs a pool of the driver's own, created exportable; the default pool's handle types are not this driver's to choose")
	}
	return nil
}

func (o Options) threshold() uint64 {
	if o.ReleaseThreshold == 0 {
		return DefaultReleaseThreshold
	}
	return uint64(o.ReleaseThreshold)
}

// Driver is one HIP device. Every method is safe for concurrent use.
type Driver struct {
	rt   *runtimeAPI
	opts Options
	info alloc.DeviceInfo

	warnings []string // set at open, read-only after

	dev     *osThread // device-dependent calls, device current
	capture *osThread // begin/end capture only

	pool    uintptr // hipMemPool_t
	ownPool bool    // created here (destroyed at Close), not the default pool

	closed   atomic.Bool
	released chan struct{} // closed once Close's vendor teardown has run
	closeErr error         // the teardown's error, read after released

	hostErrMu sync.Mutex
	hostErrs  map[alloc.Stream]error // host function failures, for the next synchronize

	mu      sync.Mutex                            // writers of streams and hosts
	streams atomic.Pointer[map[alloc.Stream]bool] // live streams, read lock-free
	hosts   atomic.Pointer[[]hostRegion]          // pinned buffers by address
}

var (
	_ alloc.Driver           = (*Driver)(nil)
	_ alloc.GraphMemTrimmer  = (*Driver)(nil)
	_ alloc.IPCMemory        = (*Driver)(nil)
	_ alloc.PoolTrimmer      = (*Driver)(nil)
	_ alloc.HostFuncLauncher = (*Driver)(nil)
)

// New loads the HIP runtime and opens a device. Without a usable runtime
// or device, or with a runtime older than 5.6 unless opts.NoCapture, the
// error wraps alloc.ErrBackendUnavailable and says what was searched or
// found; bad options wrap alloc.ErrInvalidValue.
//
// Opening makes device-wide calls (hipSetDevice, hipMemGetInfo, pool
// creation, the reserve's synchronize), so New runs under alloc's guard
// for the "hip" capture domain: while a Global-mode capture is active
// anywhere in the process it makes no driver call and fails with an error
// wrapping alloc.ErrCaptureIllegalOp; retry after the capture ends.
func New(opts Options) (*Driver, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var d *Driver
	err := alloc.DeviceWide(captureDomain, "hip: open device", func() error {
		var err error
		d, err = openGuarded(opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openGuarded is open under the domain's guard.
func openGuarded(opts Options) (*Driver, error) {
	rt, err := loadRuntime(os.Getenv, func(rt *runtimeAPI) error { return checkCaptureVersion(rt, opts.NoCapture) })
	if err != nil {
		return nil, err
	}
	d := &Driver{rt: rt, opts: opts, released: make(chan struct{})}
	d.streams.Store(&map[alloc.Stream]bool{})
	d.hosts.Store(&[]hostRegion{})
	if err := d.checkDevice(); err != nil {
		return nil, err
	}
	setDevice := func() error {
		return rt.check(fmt.Sprintf("make device %d current", opts.Device), "hipSetDevice", call(rt.setDevice, uintptr(opts.Device)))
	}
	if d.dev, err = startThread(setDevice); err != nil {
		return nil, err
	}
	if d.capture, err = startThread(setDevice); err != nil {
		d.dev.stop()
		return nil, err
	}
	if err := d.dev.do("open", d.setup); err != nil {
		d.dev.stop()
		d.capture.stop()
		return nil, err
	}
	return d, nil
}

// checkDevice refuses a device ordinal the runtime did not report, as
// unavailable (a fallback chain moves on). The count is the loader's one
// probe: hipGetDeviceCount is not called again.
//
// hipDeviceAttributeMemoryPoolsSupported is read but does not refuse the
// device on its own: ROCm 5.6 to 6.1 report it false by default although
// pools work. A device that really lacks pools fails at pool creation
// (hipMemPoolCreate), with that call's code.
func (d *Driver) checkDevice() error {
	rt, dev := d.rt, d.opts.Device
	if dev >= rt.devices {
		return errf(alloc.ErrBackendUnavailable, "device %d requested, %d present (%s, HIP runtime %s)", dev, rt.devices, rt.path, versionString(rt.runtimeVersion))
	}
	var pools int32
	if err := rt.check("query memory pool support", "hipDeviceGetAttribute",
		call(rt.deviceGetAttribute, uintptr(unsafe.Pointer(&pools)), devAttrMemoryPoolsSupported, uintptr(dev))); err != nil {
		return err
	}
	if pools == 0 {
		d.warn("device %d reports hipDeviceAttributeMemoryPoolsSupported = 0 (ROCm 5.6-6.1 report 0 by default although pools work); trying the pool anyway", dev)
	}
	return nil
}

// setup runs on the dev thread: device info, the pool, the reservation.
func (d *Driver) setup() error {
	rt, dev := d.rt, d.opts.Device
	var integrated int32
	if err := rt.check("query integrated", "hipDeviceGetAttribute",
		call(rt.deviceGetAttribute, uintptr(unsafe.Pointer(&integrated)), devAttrIntegrated, uintptr(dev))); err != nil {
		return err
	}
	total, err := d.totalMemory(integrated != 0)
	if err != nil {
		return err
	}
	if rt.graphMemTrim == 0 {
		d.warn("%s lacks hipDeviceGraphMemTrim: memory freed by graphs is not returned to the OS by Trim", rt.path)
	}
	if rt.launchHostFunc == 0 {
		d.warn("%s lacks hipLaunchHostFunc: LaunchHostFunc fails", rt.path)
	}
	d.info = alloc.DeviceInfo{
		Name:          fmt.Sprintf("hip:%d %s (HIP runtime %s)", dev, d.deviceName(), versionString(rt.runtimeVersion)),
		TotalMemory:   int64(min(total, math.MaxInt64)),
		Alignment:     Alignment,
		UnifiedMemory: integrated != 0,
	}
	if err := d.createPool(); err != nil {
		return err
	}
	if err := d.reserve(); err != nil {
		d.destroyPool()
		return err
	}
	return nil
}

// totalMemory is hipMemGetInfo's total; when that fails or reports 0, or
// under-reports an integrated (APU) device's memory, hipDeviceTotalMem's
// answer is used instead and Warnings says so. Only when neither answers
// is open refused.
func (d *Driver) totalMemory(integrated bool) (uint64, error) {
	var free, total, devTotal uint64
	err := d.rt.check("memory info", "hipMemGetInfo", call(d.rt.memGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	if call(d.rt.deviceTotalMem, uintptr(unsafe.Pointer(&devTotal)), uintptr(d.opts.Device)) != 0 {
		devTotal = 0
	}
	switch {
	case (err != nil || total == 0) && devTotal == 0:
		if err == nil {
			err = errf(alloc.ErrDriver, "hipMemGetInfo reported a total of 0 B and hipDeviceTotalMem is unavailable")
		}
		return 0, err
	case err != nil:
		d.warn("total memory from hipDeviceTotalMem (%d B): %v", devTotal, err)
		return devTotal, nil
	case total == 0:
		d.warn("total memory from hipDeviceTotalMem (%d B): hipMemGetInfo reported a total of 0 B", devTotal)
		return devTotal, nil
	case integrated && devTotal > total:
		d.warn("total memory from hipDeviceTotalMem (%d B): hipMemGetInfo under-reports unified memory (%d B)", devTotal, total)
		return devTotal, nil
	}
	return total, nil
}

// warn records something an operator should know about this driver.
func (d *Driver) warn(format string, args ...any) {
	d.warnings = append(d.warnings, fmt.Sprintf(format, args...))
}

// Warnings lists what went wrong, without being fatal, while opening the
// driver: a total memory taken from hipDeviceTotalMem, a missing optional
// symbol, a device that reports no memory pool support. Fixed at open.
func (d *Driver) Warnings() []string { return append([]string(nil), d.warnings...) }

// deviceName is hipDeviceGetName's answer, or "" when it fails.
func (d *Driver) deviceName() string {
	buf := make([]byte, deviceNameLen)
	if call(d.rt.deviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(d.opts.Device)) != 0 {
		return ""
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i])
		}
	}
	return string(buf)
}

// TrimGraphMemory is hipDeviceGraphMemTrim: memory that graphs allocated
// and freed stays cached for graphs until this returns it to the OS. It
// is device-wide: alloc calls it only under its guard; it runs on the dev
// thread. Without the optional symbol (5.2.3 lacks it) it does nothing
// (see Warnings).
func (d *Driver) TrimGraphMemory() error {
	const op = "trim graph memory"
	if d.closed.Load() {
		return errClosed(op)
	}
	if d.rt.graphMemTrim == 0 {
		return nil
	}
	return d.dev.do(op, func() error {
		return d.rt.check(op, "hipDeviceGraphMemTrim", call(d.rt.graphMemTrim, uintptr(d.opts.Device)))
	})
}

// TrimPool is hipMemPoolTrimTo(pool, 0): the pool keeps memory freed into
// it (the release threshold defaults to everything), so a synchronous
// hipMalloc that ran out of memory can use it only once it is trimmed.
// Device-wide and unsafe like TrimGraphMemory, and called like it, under
// alloc's guard.
func (d *Driver) TrimPool() error {
	const op = "trim pool"
	if d.closed.Load() {
		return errClosed(op)
	}
	return d.dev.do(op, func() error {
		return d.rt.check(op, "hipMemPoolTrimTo", call(d.rt.memPoolTrimTo, d.pool, 0))
	})
}

func (d *Driver) Name() string           { return "hip" }
func (d *Driver) Info() alloc.DeviceInfo { return d.info }

// CaptureDomain is "hip" for every Driver: Global-mode captures are
// process wide.
func (d *Driver) CaptureDomain() string { return captureDomain }

// Runtime reports the loaded library and its version
// (major*10^7 + minor*10^5 + patch), for logs.
func (d *Driver) Runtime() (path string, runtimeVersion int) {
	return d.rt.path, d.rt.runtimeVersion
}

// Close frees the pinned buffers and streams still registered, destroys the
// driver's own pool and stops its threads. Device allocations still live
// are the allocator's to report; the pool releases them when the last is
// freed. Every later call fails with alloc.ErrClosed, at once.
//
// The vendor teardown is device-wide (hipHostFree, hipStreamDestroy,
// hipMemPoolDestroy), so it runs under alloc's guard: now, and Close
// returns its error, if no Global-mode capture is active in the process;
// otherwise it is deferred until the last Global-mode capture ends, and
// Close returns nil at once. Deferring rather than failing is deliberate:
// an engine closes drivers in defers and shutdown paths that cannot retry,
// a refused Close would leak the pool, and a blocking Close could deadlock
// against the goroutine that owns the capture. The cost is that the memory
// stays reserved until the capture ends. WaitClosed waits for the teardown
// and reports its error.
func (d *Driver) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return errClosed("close")
	}
	d.mu.Lock()
	hosts := d.hosts.Swap(&[]hostRegion{})
	streams := d.streams.Swap(&map[alloc.Stream]bool{})
	d.mu.Unlock()
	defer d.dropHostFuncs()
	now := alloc.AfterGlobalCaptures(captureDomain, func() {
		d.closeErr = d.teardown(*hosts, *streams)
		close(d.released)
	})
	if now {
		return d.closeErr
	}
	return nil
}

// WaitClosed waits until the teardown of a closed driver has run (see
// Close) and returns its error, or ctx's error if ctx ends first.
func (d *Driver) WaitClosed(ctx context.Context) error {
	select {
	case <-d.released:
		return d.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// teardown releases what the driver holds, on its dev thread, and stops
// its threads. It runs under the domain's guard.
func (d *Driver) teardown(hosts []hostRegion, streams map[alloc.Stream]bool) error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	err := d.dev.do("close", func() error {
		for _, h := range hosts {
			keep(d.freeHostRegion("close: free host buffer", h))
		}
		for s := range streams {
			keep(d.rt.check("close: destroy stream", "hipStreamDestroy", call(d.rt.streamDestroy, uintptr(s))))
		}
		d.destroyPool()
		return nil
	})
	keep(err)
	d.dev.stop()
	d.capture.stop()
	return first
}
