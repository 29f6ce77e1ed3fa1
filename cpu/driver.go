// Package cpu is a pure-Go driver.Driver that emulates a CUDA device: device
// memory at fake addresses, lazily executed stream queues, and stream capture
// into graphs with CUDA's rules. It is the reference backend the CUDA and HIP
// backends are compared with, so it is deliberately strict: queued work runs
// only when the host waits for it, and every illegal call during a capture
// fails and invalidates the capture, as the real driver does.
package cpu

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/hostregion"
)

const (
	// DefaultMemoryLimit is the device size when Options.MemoryLimit is 0.
	DefaultMemoryLimit int64 = 4 << 30
	// Alignment is the guaranteed alignment of every device allocation. Each
	// allocation starts at offset 0 of its own address range, so it holds
	// trivially; the limit accounting rounds sizes up to it, like a device.
	Alignment int64 = 256

	// A device address is id<<offsetBits | offset: lookup is a slice index.
	offsetBits        = 40
	offsetMask        = 1<<offsetBits - 1
	maxAllocationSize = 1 << offsetBits
	maxIDs            = 1 << (64 - offsetBits)

	// maxQueue bounds a stream's queue (about CUDA's pending-launch depth);
	// past it the enqueuing call runs the queue, as a real device makes
	// progress when its queue fills up.
	maxQueue = 1024
)

// Options configures an emulated device.
type Options struct {
	// MemoryLimit is the device memory size in bytes (0: DefaultMemoryLimit).
	// It is enforced: allocations past it fail with driver.ErrOutOfMemory
	// before any Go memory is allocated.
	MemoryLimit int64
	// HostMemoryLimit caps pinned host memory from HostAlloc (0: the same as
	// MemoryLimit), so an absurd size is an error rather than a Go crash.
	HostMemoryLimit int64
	// NoCapture emulates a device without graph support: BeginCapture fails
	// with driver.ErrCaptureUnavailable.
	NoCapture bool
	// HostMemory, when set, supplies HostAlloc's memory (the plugin server
	// passes shared memory); nil: the Go heap. HostMemoryLimit still applies.
	HostMemory driver.HostMemory
	// DeviceMemory, when set, supplies the bytes behind device allocations
	// (the plugin server passes shared memory, which DirectSpan hands out);
	// nil: the Go heap. MemoryLimit still applies.
	DeviceMemory driver.DeviceMemory
	// Profile emulates a device's safety profile (docs/capture-safety.md):
	// "" is the documented CUDA rules; "gb10" is NVIDIA GB10 (sm_121,
	// integrated, unified memory): Info reports it, its capture safety is
	// strict, and a synchronous allocation or free, or a host allocation or
	// free, made while any capture is active on the device fails (the real
	// driver hangs).
	Profile string
	// CaptureSafety overrides the profile's capture safety (SafetyUnset:
	// the profile's own).
	CaptureSafety driver.CaptureSafety
}

// ProfileGB10 is Options.Profile for the GB10 emulation.
const ProfileGB10 = "gb10"

// instances numbers drivers so each gets its own capture domain.
var instances atomic.Int64

// Driver is the emulated device. Every method is safe for concurrent use.
//
// Lock order: stream.execMu, then stream.mu, then Driver.mu. Driver.mu is
// never held while taking a stream lock, so a drain (which may free memory
// under Driver.mu) can never deadlock with an allocation.
type Driver struct {
	domain    string
	limit     int64
	hostLimit int64
	noCapture bool
	hostMem   driver.HostMemory   // nil: HostAlloc uses the Go heap
	devMem    driver.DeviceMemory // nil: device allocations use the Go heap

	closed atomic.Bool

	// Read lock-free on every operation; replaced copy-on-write under mu.
	table   atomic.Pointer[idTable]
	streams atomic.Pointer[map[driver.Stream]*stream]
	// hot caches streams by handle, direct-mapped, in front of the map:
	// the allocator asks a stream's capture status before every
	// operation, and a slot load is cheaper than a map lookup. Written
	// under mu when a stream is created (it takes its slot) or destroyed
	// (it leaves it); a colliding stream is found in the map.
	hot   [hotStreams]atomic.Pointer[stream]
	hosts hostregion.Set[hostRegion]

	// vmCtl serializes the VirtualMemory calls (and Close against them);
	// vmMu guards the reservations' mapped state: control calls write it,
	// operations touching reserved memory read-hold it while they do, so a
	// chunk is never unmapped under them. Order: vmCtl, vmMu, mu.
	vmCtl sync.Mutex
	vmMu  sync.RWMutex

	mu         sync.Mutex
	freeIDs    []uint32 // FIFO, so a stale address is unlikely to alias a new allocation soon
	freeHead   int
	live       int64 // device bytes in use, rounded to Alignment, graph memory included
	liveCount  int
	hostLive   int64
	nextHandle uint64 // streams, graphs and execs share one counter: handles never collide
	graphs     map[driver.GraphHandle]*graph
	execs      map[driver.GraphExec]*graphExec
	globalCaps map[*capture]struct{} // Global-mode captures not yet ended, invalidated ones included
	allCaps    map[*capture]struct{} // captures of every mode not yet ended
	gb10       bool                  // Options.Profile is ProfileGB10
	safety     driver.CaptureSafety  // Info's CaptureSafety
}

// The contract and the optional interfaces the cpu driver implements
// (alloc/driver/optional.go), checked when the package compiles.
var (
	_ driver.Driver           = (*Driver)(nil)
	_ driver.HostFuncLauncher = (*Driver)(nil)
	_ driver.StreamIdler      = (*Driver)(nil)
	_ driver.StreamPoller     = (*Driver)(nil)
	_ driver.MemInfoer        = (*Driver)(nil)
	_ driver.UsageReporter    = (*Driver)(nil)
	_ driver.DirectSpanner    = (*Driver)(nil)
	_ driver.VirtualMemory    = (*Driver)(nil)
)

// New creates an emulated device.
func New(opts Options) (*Driver, error) {
	if opts.MemoryLimit < 0 || opts.HostMemoryLimit < 0 {
		return nil, fmt.Errorf("%w: cpu: negative memory limit (device %d, host %d)",
			driver.ErrInvalidValue, opts.MemoryLimit, opts.HostMemoryLimit)
	}
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = DefaultMemoryLimit
	}
	if opts.HostMemoryLimit == 0 {
		opts.HostMemoryLimit = opts.MemoryLimit
	}
	safety := driver.SafetyDocumented
	switch opts.Profile {
	case "":
	case ProfileGB10:
		safety = driver.SafetyStrict
	default:
		return nil, fmt.Errorf("%w: cpu: profile %q: want %q or none", driver.ErrInvalidValue, opts.Profile, ProfileGB10)
	}
	if opts.CaptureSafety != driver.SafetyUnset {
		safety = opts.CaptureSafety
	}
	d := &Driver{
		gb10:       opts.Profile == ProfileGB10,
		safety:     safety,
		allCaps:    make(map[*capture]struct{}),
		domain:     fmt.Sprintf("cpu#%d", instances.Add(1)),
		limit:      opts.MemoryLimit,
		hostLimit:  opts.HostMemoryLimit,
		noCapture:  opts.NoCapture,
		hostMem:    opts.HostMemory,
		devMem:     opts.DeviceMemory,
		graphs:     make(map[driver.GraphHandle]*graph),
		execs:      make(map[driver.GraphExec]*graphExec),
		globalCaps: make(map[*capture]struct{}),
	}
	d.table.Store(&idTable{})
	d.streams.Store(&map[driver.Stream]*stream{})
	return d, nil
}

// Open is a factory for registries: New with default options.
func Open() (driver.Driver, error) { return New(Options{}) }

func (d *Driver) Name() string { return "cpu" }

func (d *Driver) Info() driver.DeviceInfo {
	info := driver.DeviceInfo{
		Name:          "cpu (emulated)",
		TotalMemory:   d.limit,
		Alignment:     Alignment,
		UnifiedMemory: true,
		CaptureSafety: d.safety,
		Profile:       "emulated",
	}
	if d.gb10 {
		info.Name = "cpu (emulated NVIDIA GB10)"
		info.Integrated = true
		info.PageableMemoryAccess = true
		info.HostPageTables = true // GB10 is an ATS system
		info.ComputeCapability = "12.1"
		info.Profile = ProfileGB10
	}
	return info
}

// CaptureDomain is per instance: Global-mode captures only affect calls on
// the same emulated device.
func (d *Driver) CaptureDomain() string { return d.domain }

// LiveBytes is the device memory in use (rounded to Alignment), including
// memory owned by graphs and by captures in progress.
func (d *Driver) LiveBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.live
}

// LiveAllocations is the number of live device allocations.
func (d *Driver) LiveAllocations() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.liveCount
}

// HostBytes is the pinned host memory in use.
func (d *Driver) HostBytes() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hostLive
}

// Usage is LiveBytes and HostBytes together (driver.UsageReporter).
func (d *Driver) Usage() (driver.Usage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return driver.Usage{Device: d.live, Host: d.hostLive}, nil
}

// MemInfo is the device's memory limit and what is left of it
// (driver.MemInfoer): device allocations, graphs' and mapped chunks
// included, counted as the limit counts them.
func (d *Driver) MemInfo() (free, total int64, err error) {
	if d.closed.Load() {
		return 0, 0, errClosed("memory info")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limit - d.live, d.limit, nil
}

// Close releases every allocation, stream, graph, host buffer and address
// reservation (with whatever is still mapped in it). Work still
// queued is dropped. Every later call, Close included, fails with ErrClosed.
func (d *Driver) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return errClosed("close")
	}
	for i := range d.hot {
		d.hot[i].Store(nil)
	}
	streams := d.streams.Swap(&map[driver.Stream]*stream{})
	d.vmCtl.Lock()
	defer d.vmCtl.Unlock()
	d.mu.Lock()
	var live []*allocation
	for _, sl := range d.table.Load().slots {
		if r := sl.rec.Load(); r != nil && !r.dead.Swap(true) {
			live = append(live, r)
		}
	}
	d.table.Store(&idTable{})
	hosts := d.hosts.Take()
	d.freeIDs, d.freeHead = nil, 0
	d.live, d.liveCount, d.hostLive = 0, 0, 0
	d.graphs = map[driver.GraphHandle]*graph{}
	d.execs = map[driver.GraphExec]*graphExec{}
	d.globalCaps = map[*capture]struct{}{}
	d.allCaps = map[*capture]struct{}{}
	d.mu.Unlock()
	for _, s := range *streams {
		s.mu.Lock()
		s.queue, s.spare, s.cap, s.destroyed = nil, nil, nil, true
		s.mu.Unlock()
	}
	errs := d.releaseReservations(live)
	if d.devMem != nil {
		// Wait out drains already running: they may still touch the bytes.
		// Taking and dropping the execution lock is the wait; no new drain
		// can start, the streams being marked destroyed above.
		for _, s := range *streams {
			s.execMu.Lock()
			//lint:ignore SA2001 the empty critical section is a barrier on running drains
			s.execMu.Unlock()
		}
		for _, r := range live {
			if err := d.devMem.Free(r.buf); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// The queues are dropped, so nothing uses supplied host memory any more.
	if d.hostMem != nil {
		for _, r := range hosts {
			if err := d.hostMem.Free(r.buf); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) handle() uint64 {
	d.nextHandle++
	return d.nextHandle
}

func errClosed(op string) error {
	return fmt.Errorf("%w: cpu: %s: driver is closed", driver.ErrClosed, op)
}

func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: cpu: "+format, append([]any{sentinel}, args...)...)
}
