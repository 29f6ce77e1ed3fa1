package alloc

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Allocator is the capture-safe allocator an engine uses. It owns one driver
// stream; every operation it makes is ordered on that stream. All methods
// are safe for concurrent use.
//
// It composes a pool of device memory (pool.go), the per-P caches in front
// of it (shard.go), and the guard (guard.go), which owns the capture state,
// the capture domain's gate, the watchdog and every refusal.
//
// Lock order, outermost first; a lock is only taken while holding locks
// above it in the list, never below:
//
//  1. eagerMu, the eager lock: an eager-fallback graph's run holds it while
//     its function runs, and that function calls the allocator, which
//     takes the gate and mu below it.
//  2. the gate of the capture domain (gate.go), shared side by a blocking
//     call, exclusive side by BeginCapture. Code under mu only tries it
//     (TryRLock), which cannot wait.
//  3. mu, the allocator lock.
//  4. the shards' locks (shard.go), in ascending order when several are
//     held (lane.closeLocked, lane.addStatsLocked); the lane's Alloc and
//     Free take their own shard's alone, without mu.
//
// Leaves, under which no other lock is taken: the domain's lock (domain.mu)
// and the domain registry's, the gate's own mutex, the watchdog monitor's
// lock (watches.mu), the allocator registry's lock (registry.go), the
// allocation history's lock (history.go: taken under mu or a shard's),
// its file writer's (history_file.go: taken under mu, never held while
// the history's is taken).
type Allocator struct {
	drv     driver.Driver
	backend string
	name    string // registry.go
	info    driver.DeviceInfo
	stream  driver.Stream
	opts    Options
	vm      driver.VirtualMemory // Options.ExpandableSegments: the driver's; else nil

	lane     lane     // per-P caches serving the common Alloc and Free without a.mu (shard.go)
	releases releases // ends blocks' lives, makes the unsafe frees (release.go)

	mu         sync.Mutex
	guard      guard // capture state and the rules (guard.go); its state under mu
	pool       pool
	live       liveList   // AllocSync and graph blocks
	pooledLive int        // pooled blocks handed out through a.mu, less those retired through it
	closing    bool       // Close left its teardown for later (finishClose)
	eager      *eagerRun  // an eager-fallback graph's function is running
	eagerMu    sync.Mutex // serializes eager-fallback runs
	graphs     map[*Graph]struct{}
	graphPools map[*GraphPool]struct{} // not yet disposed (graphpool.go)
	hosts      map[*HostBuffer]struct{}
	host       hostCache // freed pinned host memory for reuse (hostcache.go)
	workspaces map[string]*block
	wsAlloc    string      // the workspace Workspace allocates now: its block's name from hand-out on
	stats      counters    // every counter; Stats derives from it (stats.go)
	prof       memProfile  // sampled allocations (profile.go)
	oomCalling atomic.Bool // Options.OnOutOfMemory is running (oom_callback.go)
	gcAt       int64       // reserved bytes over which cached memory goes back (gc.go); 0: off
}

// New makes an allocator with its own stream on drv. The caller keeps
// ownership of drv and closes it after the allocator.
func New(drv driver.Driver, opts Options) (*Allocator, error) {
	if drv == nil {
		return nil, wrapf(ErrInvalidValue, "nil driver")
	}
	vm, _ := drv.(driver.VirtualMemory)
	if opts.ExpandableSegments && !canExpand(drv) {
		return nil, &Error{Op: "New", Backend: drv.Name(), Size: -1, Err: fmt.Errorf("%w: expandable segments need a driver with virtual memory management (driver.VirtualMemory); backend %s has none", errors.ErrUnsupported, drv.Name())}
	}
	if !opts.ExpandableSegments {
		vm = nil
	}
	info := drv.Info()
	if err := driver.CheckAlignment(info.Alignment); err != nil {
		return nil, &Error{Op: "New", Backend: drv.Name(), Size: -1, Err: err}
	}
	limit, limitKey, err := limitOf(drv, opts)
	if err == nil {
		err = checkGCThreshold(opts.GCThreshold)
	}
	if err == nil {
		err = checkHistory(opts)
	}
	if err != nil {
		return nil, &Error{Op: "New", Backend: drv.Name(), Size: -1, Err: err}
	}
	a := &Allocator{
		drv:        drv,
		backend:    drv.Name(),
		info:       info,
		opts:       opts,
		vm:         vm,
		graphs:     map[*Graph]struct{}{},
		graphPools: map[*GraphPool]struct{}{},
		hosts:      map[*HostBuffer]struct{}{},
		workspaces: map[string]*block{},
	}
	if err := register(a, opts.Name); err != nil {
		return nil, &Error{Op: "New", Backend: a.backend, Size: -1, Err: err}
	}
	s, err := drv.CreateStream()
	if err != nil {
		unregister(a)
		return nil, &Error{Op: "New", Backend: a.backend, Size: -1, Err: err}
	}
	a.stream = s
	a.host.init()
	a.stats.hist = newHistory(a)
	a.stats.limit.max, a.stats.limit.key = limit, limitKey
	a.gcAt = gcAt(opts, limit, info.TotalMemory)
	a.pool.init(a, a.info.Alignment, a.info.TotalMemory, driverUpstream{a})
	a.lane.init(a)
	a.guard = newGuard(&a.mu, a, &a.releases, drv, s, info, opts)
	a.releases.init(a) // after the guard: it shares the guard's domain and watchdog
	publish(a)         // last: readers of the registry see it whole
	if opts.ProfileRate != 0 {
		_, _ = SetProfileRate(max(opts.ProfileRate, 0)) // never fails for a rate >= 0
	}
	return a, nil
}

// Driver returns the driver the allocator runs on.
func (a *Allocator) Driver() driver.Driver { return a.drv }

// Stream returns the allocator's stream, for engines that launch their own
// kernels on it (and for tests that start a capture behind its back).
func (a *Allocator) Stream() driver.Stream { return a.stream }

// Info describes the device.
func (a *Allocator) Info() driver.DeviceInfo { return a.info }

// fail wraps err with the operation's context.
func (a *Allocator) fail(op string, size int64, st CaptureState, err error) error {
	return a.guard.fail(op, size, st, err)
}

// validateLocked checks that b is a live buffer of this allocator and that
// [off, off+n) lies inside it. Caller holds a.mu.
func (a *Allocator) validateLocked(b Buffer, off, n int64) error {
	if b.blk == nil {
		return wrapf(ErrInvalidBuffer, "zero Buffer")
	}
	if b.blk.a != a {
		return wrapf(ErrInvalidBuffer, "buffer %#x belongs to another allocator", b.ptr)
	}
	if !b.blk.validFor(b.gen) {
		return wrapf(ErrInvalidBuffer, "buffer %#x was freed (double free or use after free)", b.ptr)
	}
	if off < 0 || n < 0 || off > b.size || n > b.size-off {
		return wrapf(ErrOutOfRange, "range [%d, %d+%d) outside buffer of %d B", off, off, n, b.size)
	}
	return nil
}
