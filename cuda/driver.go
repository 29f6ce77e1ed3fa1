// Package cuda is the alloc.Driver for NVIDIA GPUs, bound to the CUDA
// runtime (libcudart) at run time through purego: no cgo, so it builds with
// CGO_ENABLED=0 for linux/amd64 and linux/arm64, and a machine without CUDA
// gets an error wrapping alloc.ErrBackendUnavailable that says what was
// searched, never a crash. See docs/cuda-backend.md.
package cuda

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

// Alignment is the guaranteed alignment of device allocations: the CUDA
// programming guide states every address returned by the runtime's
// allocation routines is aligned to at least 256 bytes.
const Alignment int64 = 256

// DefaultReleaseThreshold keeps every byte the pool has reserved (the
// pool's threshold is a cuuint64_t; UINT64_MAX means "never trim at
// synchronize"). CUDA's own default of 0 returns memory to the OS at every
// synchronize, which on GB10's unified memory stalls the process.
const DefaultReleaseThreshold uint64 = math.MaxUint64

// captureDomain is one per process: every CUDA context in the process sees
// every Global-mode capture, whichever Driver started it.
const captureDomain = "cuda"

// Options configures a Driver. The zero value is device 0, a dedicated pool
// that never trims, default-priority non-blocking streams.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// ReleaseThreshold is the pool's cudaMemPoolAttrReleaseThreshold in
	// bytes: memory above it is returned to the OS at synchronize. 0 means
	// DefaultReleaseThreshold; there is deliberately no way to ask for 0.
	ReleaseThreshold int64
	// Reserve is allocated and freed once at New, so the pool holds that
	// much from the start. It must not exceed ReleaseThreshold, or the
	// pool would give it back at the first synchronize.
	Reserve int64
	// DefaultPool uses the device's default pool
	// (cudaDeviceGetDefaultMemPool), shared with every cudaMallocAsync in
	// the process, instead of a pool of this driver's own.
	DefaultPool bool
	// StreamPriority is passed to cudaStreamCreateWithPriority (lower is
	// higher priority; CUDA clamps it to the device's range).
	StreamPriority int
	// Blocking creates streams without cudaStreamNonBlocking, so they
	// synchronize implicitly with the legacy default stream. The zero value
	// (false) gives non-blocking streams, and that is what you want: while
	// a blocking stream is capturing, in any mode, CUDA refuses work on the
	// legacy stream (906, cudaErrorStreamCaptureImplicit) and invalidates
	// the capture, so another library's cudaMemcpy or default-stream work
	// (CuPy's, for one) breaks it (measured: docs/cuda-truth.md). Ask for
	// blocking streams only when an engine relies on the legacy stream's
	// implicit ordering with this driver's streams.
	Blocking bool
	// HostMemory, when set, supplies HostAlloc's memory, which the driver
	// pins with cudaHostRegister instead of allocating with cudaHostAlloc.
	// The plugin server passes its shared memory (backends.Choice.Memory),
	// so pinned buffers are visible to the engine's process and plugin:cuda
	// moves no bytes over RPC.
	HostMemory backends.HostMemory
	// IPC creates the driver's pool with cudaMemHandleTypePosixFileDescriptor
	// so it can be exported (ExportPool). Not with DefaultPool.
	IPC bool
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

// Driver is one CUDA device. Every method is safe for concurrent use.
type Driver struct {
	rt   *runtimeAPI
	opts Options
	info alloc.DeviceInfo

	warnings []string // set at open, read-only after

	dev     *osThread // device-dependent calls, device current
	capture *osThread // begin/end capture only

	pool    uintptr // cudaMemPool_t
	capPool uintptr // with Options.IPC: the pool captures allocate from (not exportable)
	ownPool bool    // created here (destroyed at Close), not the default pool

	closed   atomic.Bool
	released chan struct{} // closed once Close's vendor teardown has run
	closeErr error         // the teardown's error, read after released

	mu      sync.Mutex                            // writers of streams and hosts
	streams atomic.Pointer[map[alloc.Stream]bool] // live streams, read lock-free
	hosts   atomic.Pointer[[]hostRegion]          // pinned buffers by address

	hostErrMu sync.Mutex
	hostErrs  map[alloc.Stream]error // host function failures, for the next synchronize
}

var (
	_ alloc.Driver           = (*Driver)(nil)
	_ alloc.GraphMemTrimmer  = (*Driver)(nil)
	_ alloc.PoolTrimmer      = (*Driver)(nil)
	_ alloc.HostFuncLauncher = (*Driver)(nil)
	_ alloc.IPCMemory        = (*Driver)(nil)
)

// New loads the CUDA runtime and opens a device. Without a usable runtime,
// driver or device the error wraps alloc.ErrBackendUnavailable and says
// what was searched or found; bad options wrap alloc.ErrInvalidValue.
//
// Opening makes device-wide calls (cudaSetDevice, cudaMemGetInfo, pool
// creation, the reserve's synchronize) that would invalidate a Global-mode
// capture, or hang on GB10. So New runs under alloc's guard for the "cuda"
// capture domain: while a Global-mode capture is active anywhere in the
// process it makes no driver call and fails with an error wrapping
// alloc.ErrCaptureIllegalOp; retry after the capture ends.
func New(opts Options) (*Driver, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	var d *Driver
	err := alloc.DeviceWide(captureDomain, "cuda: open device", func() error {
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
	rt, err := loadRuntime(os.Getenv)
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
		return rt.check(fmt.Sprintf("make device %d current", opts.Device), "cudaSetDevice", call(rt.setDevice, uintptr(opts.Device)))
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

// checkDevice refuses a machine without the device or without memory pool
// support, as unavailable: a fallback chain moves on to the next backend.
func (d *Driver) checkDevice() error {
	rt, dev := d.rt, d.opts.Device
	var n int32
	if err := rt.check("count devices", "cudaGetDeviceCount", call(rt.getDeviceCount, uintptr(unsafe.Pointer(&n)))); err != nil {
		return err
	}
	if dev >= int(n) {
		return errf(alloc.ErrBackendUnavailable, "device %d requested, %d present (%s)", dev, n, rt.path)
	}
	var pools int32
	if err := rt.check("query memory pool support", "cudaDeviceGetAttribute",
		call(rt.deviceGetAttribute, uintptr(unsafe.Pointer(&pools)), devAttrMemoryPoolsSupported, uintptr(dev))); err != nil {
		return err
	}
	if pools == 0 {
		return errf(alloc.ErrBackendUnavailable, "device %d does not support stream-ordered memory pools (cudaDevAttrMemoryPoolsSupported = 0)", dev)
	}
	return nil
}

// setup runs on the dev thread: device info, the pool, the reservation.
func (d *Driver) setup() error {
	rt, dev := d.rt, d.opts.Device
	var integrated int32
	if err := rt.check("query integrated", "cudaDeviceGetAttribute",
		call(rt.deviceGetAttribute, uintptr(unsafe.Pointer(&integrated)), devAttrIntegrated, uintptr(dev))); err != nil {
		return err
	}
	name, propTotal := d.deviceProps()
	total, err := d.totalMemory(integrated != 0, propTotal)
	if err != nil {
		return err
	}
	if rt.graphMemTrim == 0 {
		d.warn("%s lacks cudaDeviceGraphMemTrim: memory freed by graphs is not returned to the OS by Trim", rt.path)
	}
	d.info = alloc.DeviceInfo{
		Name:          fmt.Sprintf("cuda:%d %s (runtime %s, driver %s)", dev, name, versionString(rt.runtimeVersion), versionString(rt.driverVersion)),
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

// totalMemory is cudaMemGetInfo's total, which has been reported to fail
// or under-report on unified-memory GB10. Neither is fatal: a failure (or a
// total of 0) falls back to cudaDeviceProp.totalGlobalMem, and on an
// integrated device the larger of the two is used; either case is recorded
// in Warnings. Only when neither source answers is open refused.
func (d *Driver) totalMemory(integrated bool, propTotal uint64) (uint64, error) {
	var free, total uint64
	err := d.rt.check("memory info", "cudaMemGetInfo", call(d.rt.memGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	switch {
	case (err != nil || total == 0) && propTotal == 0:
		if err == nil {
			err = errf(alloc.ErrDriver, "cudaMemGetInfo reported a total of 0 B and cudaDeviceProp.totalGlobalMem is unavailable")
		}
		return 0, err
	case err != nil:
		d.warn("total memory from cudaDeviceProp.totalGlobalMem (%d B): %v", propTotal, err)
		return propTotal, nil
	case total == 0:
		d.warn("total memory from cudaDeviceProp.totalGlobalMem (%d B): cudaMemGetInfo reported a total of 0 B", propTotal)
		return propTotal, nil
	case integrated && propTotal > total:
		d.warn("total memory from cudaDeviceProp.totalGlobalMem (%d B): cudaMemGetInfo under-reports unified memory (%d B)", propTotal, total)
		return propTotal, nil
	}
	return total, nil
}

// warn records something an operator should know about this driver.
func (d *Driver) warn(format string, args ...any) {
	d.warnings = append(d.warnings, fmt.Sprintf(format, args...))
}

// Warnings lists what went wrong, without being fatal, while opening the
// driver: a total memory taken from cudaDeviceProp because cudaMemGetInfo
// failed or under-reported, a missing optional symbol. Fixed at open.
func (d *Driver) Warnings() []string { return append([]string(nil), d.warnings...) }

// deviceProps reads cudaDeviceProp.name and .totalGlobalMem, or "" and 0
// without the optional symbol or when the call fails.
func (d *Driver) deviceProps() (name string, totalGlobalMem uint64) {
	if d.rt.getDeviceProperties == 0 {
		return "", 0
	}
	buf := make([]byte, devicePropsBufSize)
	if call(d.rt.getDeviceProperties, uintptr(unsafe.Pointer(&buf[0])), uintptr(d.opts.Device)) != 0 {
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

// TrimGraphMemory is cudaDeviceGraphMemTrim: memory that graphs allocated
// and freed stays cached for graphs, outside the pool's release
// threshold, until this returns it to the OS. It is device-wide: alloc
// calls it (Allocator.Trim, and before retrying an allocation that ran out
// of memory) only under its guard, never while a capture forbids it; it
// runs on the dev thread. Without the optional symbol it does nothing (see
// Warnings).
func (d *Driver) TrimGraphMemory() error {
	const op = "trim graph memory"
	if d.closed.Load() {
		return errClosed(op)
	}
	if d.rt.graphMemTrim == 0 {
		return nil
	}
	return d.dev.do(op, func() error {
		return d.rt.check(op, "cudaDeviceGraphMemTrim", call(d.rt.graphMemTrim, uintptr(d.opts.Device)))
	})
}

// TrimPool is cudaMemPoolTrimTo(pool, 0): the pool keeps memory freed into
// it (the release threshold defaults to everything), so a synchronous
// cudaMalloc that ran out of memory can use it only once it is trimmed.
// Frees whose completion the host has not observed still count as in use:
// alloc synchronizes the stream first. Device-wide and unsafe like
// TrimGraphMemory, and called like it, under alloc's guard.
func (d *Driver) TrimPool() error {
	const op = "trim pool"
	if d.closed.Load() {
		return errClosed(op)
	}
	return d.dev.do(op, func() error {
		for _, pool := range []uintptr{d.pool, d.capPool} {
			if pool == 0 {
				continue
			}
			if err := d.rt.check(op, "cudaMemPoolTrimTo", call(d.rt.memPoolTrimTo, pool, 0)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (d *Driver) Name() string           { return "cuda" }
func (d *Driver) Info() alloc.DeviceInfo { return d.info }

// CaptureDomain is "cuda" for every Driver: Global-mode captures are
// process wide in CUDA.
func (d *Driver) CaptureDomain() string { return captureDomain }

// Runtime reports the loaded library and its versions, for logs.
func (d *Driver) Runtime() (path string, runtimeVersion, driverVersion int) {
	return d.rt.path, d.rt.runtimeVersion, d.rt.driverVersion
}

// Close frees the pinned buffers and streams still registered, destroys the
// driver's own pool and stops its threads. Device allocations still live
// are the allocator's to report; the pool releases them when the last is
// freed. Every later call fails with alloc.ErrClosed, at once.
//
// The vendor teardown is device-wide (cudaFreeHost, cudaStreamDestroy,
// cudaMemPoolDestroy), so it runs under alloc's guard: now, and Close
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
			keep(d.rt.check("close: destroy stream", "cudaStreamDestroy", call(d.rt.streamDestroy, uintptr(s))))
		}
		d.destroyPool()
		return nil
	})
	keep(err)
	d.dev.stop()
	d.capture.stop()
	return first
}
