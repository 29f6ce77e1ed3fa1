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
type Allocator struct {
	drv      driver.Driver
	backend  string
	name     string // registry.go
	info     driver.DeviceInfo
	strict   bool // info's capture safety is SafetyStrict (safety.go)
	stream   driver.Stream
	dom      *domain
	opts     Options
	watchdog *watchdog
	idler    driver.StreamIdler                // nil unless the driver is one
	poll     func(driver.Stream) (bool, error) // pollerOf(drv): nil when the driver cannot be polled
	vm       driver.VirtualMemory              // Options.ExpandableSegments: the driver's; else nil

	// The lock-free lane (shard.go): per-P caches of free blocks that
	// serve the common Alloc and Free without a.mu. laneOff counts what
	// holds the lane closed (a capture, an eager run, a walk, Close); it
	// is changed under a.mu only, read without it.
	shards  []shard
	laneOff atomic.Int32
	inUse   meter // bytes in use, and their peak (stats.go)

	mu         sync.Mutex
	closed     bool
	pool       pool
	live       liveList      // AllocSync and graph blocks
	pooledLive int           // pooled blocks handed out through a.mu, less those retired through it
	cap        *capture      // capture begun by this allocator, nil when none
	transition chan struct{} // closed when a capture begin or end in flight returns
	pending    []*block      // AllocSync blocks released, for flushReleases
	pins       int           // blocking calls in flight on buffers' memory (pinLocked)
	closing    bool          // Close left its teardown for later (finishClose)
	eager      *eagerRun     // an eager-fallback graph's function is running
	eagerMu    sync.Mutex    // serializes eager-fallback runs
	lastCap    *capture      // most recently ended capture, for CaptureAllocCount
	graphs     map[*Graph]struct{}
	hosts      map[*HostBuffer]struct{}
	workspaces map[string]*block
	stats      Stats
	prof       memProfile // sampled allocations (profile.go)
	graphIDs   int        // last Graph.id given (snapshot.go)
}

// New makes an allocator with its own stream on drv. The caller keeps
// ownership of drv and closes it after the allocator.
func New(drv driver.Driver, opts Options) (*Allocator, error) {
	if drv == nil {
		return nil, wrapf(ErrInvalidValue, "nil driver")
	}
	vm, _ := drv.(driver.VirtualMemory)
	if opts.ExpandableSegments && (vm == nil || vm.MapGranularity() <= 0) { // 0: a wrapper over a driver without
		return nil, &Error{Op: "New", Backend: drv.Name(), Size: -1, Err: fmt.Errorf("%w: expandable segments need a driver with virtual memory management (driver.VirtualMemory); backend %s has none", errors.ErrUnsupported, drv.Name())}
	}
	if !opts.ExpandableSegments {
		vm = nil
	}
	info := drv.Info()
	if err := driver.CheckAlignment(info.Alignment); err != nil {
		return nil, &Error{Op: "New", Backend: drv.Name(), Size: -1, Err: err}
	}
	a := &Allocator{
		drv:        drv,
		backend:    drv.Name(),
		info:       info,
		strict:     info.CaptureSafety == driver.SafetyStrict,
		dom:        domainFor(drv.CaptureDomain()),
		opts:       opts,
		vm:         vm,
		graphs:     map[*Graph]struct{}{},
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
	a.pool.init(a.info.Alignment)
	a.shards = newShards()
	a.watchdog = &watchdog{timeout: opts.watchdog()}
	if ab, ok := drv.(driver.Aborter); ok {
		a.watchdog.abort = ab.Abort
	}
	a.idler, _ = drv.(driver.StreamIdler)
	a.poll = pollerOf(drv)
	publish(a) // last: readers of the registry see it whole
	return a, nil
}

// Driver returns the driver the allocator runs on.
func (a *Allocator) Driver() driver.Driver { return a.drv }

// Stream returns the allocator's stream, for engines that launch their own
// kernels on it (and for tests that start a capture behind its back).
func (a *Allocator) Stream() driver.Stream { return a.stream }

// Info describes the device.
func (a *Allocator) Info() driver.DeviceInfo { return a.info }

// Stats returns a snapshot of the counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.statsLocked()
}

// statsLocked completes the counters with the figures derived from state.
// Caller holds a.mu, which stops the locked path; the shards' locks, all
// held at once in addShardStatsLocked, stop the lane: so every figure,
// a.inUse included (the lane publishes into it), is of one moment.
func (a *Allocator) statsLocked() Stats {
	s := a.stats
	s.BytesCached = a.pool.cached
	s.LiveBuffers = a.live.n + a.pooledLive
	a.addShardStatsLocked(&s)
	s.LiveGraphs = len(a.graphs)
	s.Timeouts = a.watchdog.expired.Load()
	return s
}

// fail wraps err with the operation's context.
func (a *Allocator) fail(op string, size int64, st CaptureState, err error) error {
	return &Error{Op: op, Backend: a.backend, Size: size, State: st, Err: err}
}

// awaitTransitionLocked waits, a.mu released meanwhile, while the driver
// is beginning or ending a capture of this allocator. Caller holds a.mu.
func (a *Allocator) awaitTransitionLocked() {
	for a.transition != nil {
		ch := a.transition
		a.mu.Unlock()
		<-ch
		a.mu.Lock()
	}
}

// stateLocked asks the driver for the stream's capture status and folds it
// with the allocator's own flag. It fails on a closed allocator and on a
// capture the watchdog abandoned. Caller holds a.mu.
func (a *Allocator) stateLocked() (CaptureState, error) {
	a.awaitTransitionLocked()
	if a.closed {
		return StateNone, ErrClosed
	}
	st, err := a.drv.StreamCaptureStatus(a.stream)
	if err != nil {
		return StateNone, err
	}
	s := classify(a.cap != nil, st)
	if a.cap != nil && a.cap.abandoned {
		return StateInvalidated, wrapf(ErrCaptureTimeout, "capture abandoned by the watchdog; its function or driver call is still running")
	}
	return s, nil
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

// live/dead bookkeeping, caller holds a.mu.

func (a *Allocator) handOutLocked(b *block, size int64) Buffer {
	b.size = size
	gen := b.state.Add(1) // odd: live
	if b.kind == kindPooled {
		a.pooledLive++
	} else {
		a.live.push(b)
	}
	a.stats.Allocs++
	a.inUse.add(size)
	return Buffer{blk: b, gen: gen, ptr: b.ptr, size: size}
}

// retireLocked ends the life of live block b, invalidating every handle.
// Only for blocks no lock-free Free can race for: the lane is closed, or
// b is not pooled. A Free takes the block with claimLocked instead.
func (a *Allocator) retireLocked(b *block) {
	b.state.Add(1) // even: retired
	a.retiredLocked(b)
}

// claimLocked retires b for a Free of the Buffer handed out with gen: it
// fails when b is no longer that Buffer's, even when a lock-free Free of
// the same Buffer won the race since the caller validated it.
func (a *Allocator) claimLocked(b *block, gen uint64) error {
	if !b.state.CompareAndSwap(gen, gen+1) {
		return wrapf(ErrInvalidBuffer, "buffer %#x was freed (double free or use after free)", b.ptr)
	}
	a.retiredLocked(b)
	return nil
}

// retiredLocked counts b's retirement.
func (a *Allocator) retiredLocked(b *block) {
	if b.kind == kindPooled {
		a.pooledLive--
	} else {
		a.live.remove(b)
	}
	a.stats.Frees++
	a.inUse.add(-b.size)
}
