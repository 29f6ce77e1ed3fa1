package gpurt

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/hostregion"
)

// Driver is one device of a GPU runtime: the whole driver.Driver, with the
// optional interfaces both runtimes support. Every method is safe for
// concurrent use.
type Driver struct {
	v    *Vendor
	rt   *Runtime
	opts Options

	// captureGate, when set, is asked before every begin capture (hip's
	// no_capture); its error refuses the capture with no call made.
	captureGate func(op string) error

	warnings []string // set at open, read-only after
	info     driver.DeviceInfo

	dev     *Thread // device-dependent calls, device current
	capture *Thread // begin/end capture only

	pool    uintptr // the memory pool
	capPool uintptr // with Vendor.SeparateCapturePool and Options.IPC: the pool captures allocate from (not exportable)
	ownPool bool    // created here (destroyed at Close), not the default pool

	closed   atomic.Bool
	released chan struct{} // closed once Close's vendor teardown has run
	closeErr error         // the teardown's error, read after released

	mu      sync.Mutex                             // writers of streams and hosts
	streams atomic.Pointer[map[driver.Stream]bool] // live streams, read lock-free
	hosts   hostregion.Set[hostRegion]             // pinned buffers by address

	hostErrMu sync.Mutex
	hostErrs  map[driver.Stream]error // host function failures, for the next synchronize

	kernelsHook func(*Setup) (*KernelAPI, error)             // Config.Kernels
	modules     modulesState                                 // dev thread only
	kapi        atomic.Pointer[KernelAPI]                    // set at the first LoadModule
	kernels     atomic.Pointer[map[driver.Kernel]kernelInfo] // loaded kernels, read lock-free (writers hold mu)

	vmHook func(*Setup) (*VMAPI, error) // Config.VirtualMemory
	vm     vmState                      // vm.go
}

// Interfaces is driver.Driver and every optional interface
// (alloc/driver/optional.go) Driver implements, and so every vendor driver
// that embeds it (cuda and hip assert it).
type Interfaces interface {
	driver.Driver
	driver.GraphMemTrimmer
	driver.PoolTrimmer
	driver.HostFuncLauncher
	driver.IPCMemory
	driver.StreamIdler
	driver.KernelLauncher
	driver.VirtualMemory
	driver.MemInfoer
	driver.PeerAccess
}

var _ Interfaces = (*Driver)(nil)

// Config is what a vendor package passes to Open.
type Config struct {
	Vendor *Vendor
	Opts   Options
	// Load finds and binds the runtime; it runs under the domain's guard.
	Load func() (*Runtime, error)
	// CheckDevice runs after Load, before the threads start: it refuses a
	// device that cannot be used (as unavailable, so a fallback chain
	// moves on) and may warn.
	CheckDevice func(s *Setup) error
	// Describe runs on the dev thread, with the device current: the name
	// DeviceInfo gives the device, and its total memory (TotalMemory).
	Describe func(s *Setup, integrated bool) (name string, total uint64, err error)
	// CaptureGate, when set, is asked before every begin capture.
	CaptureGate func(op string) error
	// Kernels binds the module and launch calls (kernel.go). It runs on
	// the dev thread at the first LoadModule, and again at the next one if
	// it failed; without it LoadModule fails as unavailable.
	Kernels func(s *Setup) (*KernelAPI, error)
	// VirtualMemory binds the virtual memory calls (vm.go). It runs on the
	// dev thread at the first call that needs them, once: its error (or
	// its absence) means the driver offers no virtual memory.
	VirtualMemory func(s *Setup) (*VMAPI, error)
}

// Setup is what the open-time hooks see of the driver being opened.
type Setup struct {
	RT   *Runtime
	Opts Options
	d    *Driver
}

// Warn records something an operator should know about this driver
// (Driver.Warnings).
func (s *Setup) Warn(format string, args ...any) { s.d.warn(format, args...) }

// Open validates the options and, under alloc's guard for the vendor's
// capture domain, loads the runtime and opens the device. Opening makes
// device-wide calls (set device, memory info, pool creation, the reserve's
// synchronize) that would invalidate a Global-mode capture, or hang on
// GB10: while a Global-mode capture is active anywhere in the process Open
// makes no driver call and fails with an error wrapping
// driver.ErrCaptureIllegalOp; retry after the capture ends.
func Open(c Config) (*Driver, error) {
	v := c.Vendor
	if err := v.Validate(c.Opts); err != nil {
		return nil, err
	}
	var d *Driver
	err := driver.DeviceWide(v.Name, v.Name+": open device", func() error {
		var err error
		d, err = openGuarded(c)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// openGuarded is Open under the domain's guard.
func openGuarded(c Config) (*Driver, error) {
	rt, err := c.Load()
	if err != nil {
		return nil, err
	}
	v, opts := c.Vendor, c.Opts
	d := &Driver{v: v, rt: rt, opts: opts, captureGate: c.CaptureGate, kernelsHook: c.Kernels, vmHook: c.VirtualMemory, released: make(chan struct{})}
	d.vm.gran.Store(-1)
	d.streams.Store(&map[driver.Stream]bool{})
	d.kernels.Store(&map[driver.Kernel]kernelInfo{})
	s := &Setup{RT: rt, Opts: opts, d: d}
	if err := c.CheckDevice(s); err != nil {
		return nil, err
	}
	setDevice := func() error {
		return rt.Check(fmt.Sprintf("make device %d current", opts.Device), rt.SetDevice.Name, Call(rt.SetDevice.Addr, uintptr(opts.Device)))
	}
	if d.dev, err = v.StartThread(setDevice); err != nil {
		return nil, err
	}
	if d.capture, err = v.StartThread(setDevice); err != nil {
		d.dev.Stop()
		return nil, err
	}
	if err := d.dev.Do("open", func() error { return d.setup(s, c.Describe) }); err != nil {
		d.dev.Stop()
		d.capture.Stop()
		return nil, err
	}
	return d, nil
}

// setup runs on the dev thread: device info, the pool, the reservation.
func (d *Driver) setup(s *Setup, describe func(*Setup, bool) (string, uint64, error)) error {
	rt, dev := d.rt, d.opts.Device
	var integrated int32
	if err := rt.Check("query integrated", rt.DeviceGetAttribute.Name,
		Call(rt.DeviceGetAttribute.Addr, uintptr(unsafe.Pointer(&integrated)), d.v.DevAttrIntegrated, uintptr(dev))); err != nil {
		return err
	}
	name, total, err := describe(s, integrated != 0)
	if err != nil {
		return err
	}
	if rt.GraphMemTrim.Addr == 0 {
		d.warn("%s lacks %s: memory freed by graphs is not returned to the OS by Trim", rt.Path, rt.GraphMemTrim.Name)
	}
	if rt.LaunchHostFunc.Addr == 0 {
		d.warn("%s lacks %s: LaunchHostFunc fails", rt.Path, rt.LaunchHostFunc.Name)
	}
	d.info = driver.DeviceInfo{
		Name:          name,
		TotalMemory:   int64(min(total, math.MaxInt64)),
		Alignment:     d.v.Alignment,
		UnifiedMemory: integrated != 0,
		Integrated:    integrated != 0,
	}
	if err := d.classify(); err != nil {
		return err
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

// classify completes d.info's safety profile: compute capability,
// pageable memory access and whether it goes through the host's page
// tables from the device's attributes, the capture safety from
// driver.ClassifySafety unless Options.CaptureSafety overrides it. Runs on
// the dev thread.
func (d *Driver) classify() error {
	var attrs [4]int32
	for i, a := range []uintptr{d.v.DevAttrComputeCapabilityMajor, d.v.DevAttrComputeCapabilityMinor, d.v.DevAttrPageableMemoryAccess, d.v.DevAttrHostPageTables} {
		if err := d.rt.Check("query device attribute", d.rt.DeviceGetAttribute.Name,
			Call(d.rt.DeviceGetAttribute.Addr, uintptr(unsafe.Pointer(&attrs[i])), a, uintptr(d.opts.Device))); err != nil {
			return err
		}
	}
	d.info.ComputeCapability = fmt.Sprintf("%d.%d", attrs[0], attrs[1])
	d.info.PageableMemoryAccess = attrs[2] != 0
	d.info.HostPageTables = attrs[2] != 0 && attrs[3] != 0
	d.info.CaptureSafety, d.info.Profile = driver.ClassifySafety(d.info)
	if d.opts.CaptureSafety != driver.SafetyUnset {
		d.info.CaptureSafety, d.info.Profile = d.opts.CaptureSafety, "config"
	}
	return nil
}

// TotalMemory is the memory-info call's total, which has been reported to
// fail or under-report on unified-memory devices (GB10; APUs). Neither is
// fatal: a failure (or a total of 0) falls back to fallback()'s answer
// (named fallbackName in warnings; 0 when it has none), and on an
// integrated device the larger of the two is used; either case is
// recorded in Warnings. Only when neither source answers is open refused.
// fallback is called after the memory-info call.
func (s *Setup) TotalMemory(integrated bool, fallbackName string, fallback func() uint64) (uint64, error) {
	rt, d := s.RT, s.d
	var free, total uint64
	err := rt.Check("memory info", rt.MemGetInfo.Name, Call(rt.MemGetInfo.Addr, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))))
	alt := fallback()
	switch {
	case (err != nil || total == 0) && alt == 0:
		if err == nil {
			err = d.v.Errf(driver.ErrDriver, "%s reported a total of 0 B and %s is unavailable", rt.MemGetInfo.Name, fallbackName)
		}
		return 0, err
	case err != nil:
		d.warn("total memory from %s (%d B): %v", fallbackName, alt, err)
		return alt, nil
	case total == 0:
		d.warn("total memory from %s (%d B): %s reported a total of 0 B", fallbackName, alt, rt.MemGetInfo.Name)
		return alt, nil
	case integrated && alt > total:
		d.warn("total memory from %s (%d B): %s under-reports unified memory (%d B)", fallbackName, alt, rt.MemGetInfo.Name, total)
		return alt, nil
	}
	return total, nil
}

// warn records something an operator should know about this driver.
func (d *Driver) warn(format string, args ...any) {
	d.warnings = append(d.warnings, fmt.Sprintf(format, args...))
}

// Warnings lists what went wrong, without being fatal, while opening the
// driver: a total memory taken from the fallback source because the
// memory-info call failed or under-reported, a missing optional symbol, a
// device attribute the runtime is known to misreport. Fixed at open.
func (d *Driver) Warnings() []string { return append([]string(nil), d.warnings...) }

// TrimGraphMemory is the device graph-memory trim: memory that graphs
// allocated and freed stays cached for graphs, outside the pool's release
// threshold, until this returns it to the OS. It is device-wide: alloc
// calls it (Allocator.Trim, and before retrying an allocation that ran out
// of memory) only under its guard, never while a capture forbids it; it
// runs on the dev thread. Without the optional symbol it does nothing (see
// Warnings).
func (d *Driver) TrimGraphMemory() error {
	const op = "trim graph memory"
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	if d.rt.GraphMemTrim.Addr == 0 {
		return nil
	}
	return d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.GraphMemTrim.Name, Call(d.rt.GraphMemTrim.Addr, uintptr(d.opts.Device)))
	})
}

// MemInfo is the memory-info call's answer now (driver.MemInfoer):
// cudaMemGetInfo(size_t *free, size_t *total) / hipMemGetInfo, with the
// signature cuda/symbols.go and hip/symbols.go cite, made on the device's
// thread so the device it asks about is this driver's. A query: it does
// not synchronize, and is made during captures too.
func (d *Driver) MemInfo() (free, total int64, err error) {
	const op = "memory info"
	if d.closed.Load() {
		return 0, 0, d.v.ErrClosed(op)
	}
	var f, t uint64
	err = d.dev.Do(op, func() error {
		return d.rt.Check(op, d.rt.MemGetInfo.Name, Call(d.rt.MemGetInfo.Addr, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))))
	})
	if err != nil {
		return 0, 0, err
	}
	return int64(f), int64(t), nil
}

// TrimPool is the pool trim to 0: the pool keeps memory freed into it (the
// release threshold defaults to everything), so a synchronous malloc that
// ran out of memory can use it only once it is trimmed. Frees whose
// completion the host has not observed still count as in use: alloc
// synchronizes the stream first. Device-wide and unsafe like
// TrimGraphMemory, and called like it, under alloc's guard.
func (d *Driver) TrimPool() error {
	const op = "trim pool"
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	return d.dev.Do(op, func() error {
		for _, pool := range []uintptr{d.pool, d.capPool} {
			if pool == 0 {
				continue
			}
			if err := d.rt.Check(op, d.rt.MemPoolTrimTo.Name, Call(d.rt.MemPoolTrimTo.Addr, pool, 0)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Name is the backend's name ("cuda", "hip").
func (d *Driver) Name() string            { return d.v.Name }
func (d *Driver) Info() driver.DeviceInfo { return d.info }

// CaptureDomain is the backend's name for every Driver of it: Global-mode
// captures are process wide in CUDA and HIP.
func (d *Driver) CaptureDomain() string { return d.v.Name }

// OnDevice runs fn on the driver's device thread: a locked OS thread on
// which the driver's device is current (see thread.go). It is for
// libraries bound next to the runtime whose calls act on "the current
// device" of the calling thread, such as ncclCommInitRank. fn runs after
// the device calls queued before it and blocks those queued after it, so
// it must not wait on this driver's own calls. Calls fn makes are not
// guarded: a device-wide call belongs under driver.DeviceWide. op names the
// caller in errors; after Close it fails with driver.ErrClosed.
func (d *Driver) OnDevice(op string, fn func() error) error {
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	return d.dev.Do(op, fn)
}

// Close frees the pinned buffers and streams still registered, releases
// the address reservations still held (unmapping what is mapped in them),
// unloads the modules LoadModule loaded, destroys the driver's own pool and stops
// its threads. Device allocations still live
// are the allocator's to report; the pool releases them when the last is
// freed. Every later call fails with driver.ErrClosed, at once.
//
// The vendor teardown is device-wide (pinned host free, stream destroy,
// module unload, pool destroy), so it runs under alloc's guard: now, and Close returns
// its error, if no Global-mode capture is active in the process; otherwise
// it is deferred until the last Global-mode capture ends, and Close
// returns nil at once. Deferring rather than failing is deliberate: an
// engine closes drivers in defers and shutdown paths that cannot retry, a
// refused Close would leak the pool, and a blocking Close could deadlock
// against the goroutine that owns the capture. The cost is that the memory
// stays reserved until the capture ends. WaitClosed waits for the teardown
// and reports its error.
func (d *Driver) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return d.v.ErrClosed("close")
	}
	d.mu.Lock()
	hosts := d.hosts.Take()
	streams := d.streams.Swap(&map[driver.Stream]bool{})
	d.kernels.Store(&map[driver.Kernel]kernelInfo{})
	d.mu.Unlock()
	defer d.dropHostFuncs()
	now := driver.AfterGlobalCaptures(d.v.Name, func() {
		d.closeErr = d.teardown(hosts, *streams)
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
func (d *Driver) teardown(hosts []hostRegion, streams map[driver.Stream]bool) error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	err := d.dev.Do("close", func() error {
		for _, h := range hosts {
			keep(d.freeHostRegion("close: free host buffer", h))
		}
		for s := range streams {
			keep(d.rt.Check("close: destroy stream", d.rt.StreamDestroy.Name, Call(d.rt.StreamDestroy.Addr, uintptr(s))))
		}
		keep(d.releaseVM())
		keep(d.unloadModules())
		d.destroyPool()
		return nil
	})
	keep(err)
	d.dev.Stop()
	d.capture.Stop()
	return first
}

// The vendor packages' own access to a driver (not methods: the vendor
// driver embeds *Driver, and every exported method is its public API).

// Pool is the driver's memory pool (cuda's truth probe uses it).
func Pool(e Embedder) uintptr { return e.gpurtDriver().pool }

// Pinned reports whether b lies inside one HostAlloc buffer.
func Pinned(e Embedder, b []byte) bool { return e.gpurtDriver().pinned(b) }

// HostBuffers is the number of live HostAlloc buffers.
func HostBuffers(e Embedder) int { return e.gpurtDriver().hosts.Len() }

// Embedder is *Driver and every vendor driver that embeds it: the
// functions below take it, so they work on a cuda.Driver or hip.Driver
// from any package without adding to their methods.
type Embedder interface{ gpurtDriver() *Driver }

func (d *Driver) gpurtDriver() *Driver { return d }
