package alloc

import (
	"log/slog"
	"time"
)

// DefaultWatchdog bounds blocking driver calls and captures when
// Options.Watchdog is zero.
const DefaultWatchdog = 60 * time.Second

// Options configures an Allocator.
type Options struct {
	// Watchdog is the deadline for blocking driver calls (synchronize,
	// blocking copies, capture begin) and for the function WithCapture runs.
	// Zero means DefaultWatchdog; negative disables the watchdog.
	Watchdog time.Duration
	// Logger receives warnings (lazy workspace allocations at EndCapture,
	// leaks at Close). Nil means slog.Default().
	Logger *slog.Logger
	// Name tells the allocator apart in profiles, snapshots, the HTTP view
	// (alloc/allocview) and metrics (alloc/allocprom). Open allocators
	// have distinct names: New refuses one in use. Empty means the
	// backend's name and a number ("cpu-1").
	Name string
	// ExpandableSegments makes the pool grow one reserved address range
	// per arena, with physical memory mapped into it on demand, instead
	// of separate driver allocations (PyTorch's expandable_segments): free
	// memory merges across what would have been segment boundaries, and
	// free chunks can be unmapped while their neighbours are in use. It
	// needs a driver that implements VirtualMemory: New fails with an
	// error wrapping errors.ErrUnsupported otherwise. Buffers from such a
	// range cannot be exported (driver.IPCMemory): export buffers from
	// AllocSync.
	// docs/allocator-core.md, "Expandable segments".
	ExpandableSegments bool
	// ProfileRate, when not zero, is the process's sampling rate for
	// allocation profiles that New sets (SetProfileRate) once the
	// allocator is open: bytes per sample, 1 for every allocation, and
	// negative to turn sampling off. Zero leaves the rate as it is. The
	// rate is the process's, not one allocator's (as the runtime's
	// MemProfileRate is); it is an option so that a configuration string
	// (ParseOptions, profile_rate) can set it.
	ProfileRate int
	// History keeps the allocator's latest History events (allocations,
	// frees, driver allocations and releases, captures, graph closes,
	// out-of-memory errors), each with its time, size, address, state and
	// call stack, for WriteHistory and the timeline view
	// (alloc/allocview): PyTorch's _record_memory_history. Zero (the
	// default) records nothing; each event kept takes 256 B, allocated
	// in New. At most 4,194,304 events (a ring of 1 GiB: more than the
	// hours of events a timeline is read for); New refuses more with
	// ErrInvalidValue, as ParseOptions does.
	// docs/allocation-history.md.
	History int
	// HistoryFile, with History on, is where the history is written at
	// each out-of-memory error: a snapshot taken when the error is made,
	// written in the background (latest wins), replacing the file whole.
	// The file must be a regular file or absent, in a directory (not a
	// symlink) owned by the process's user or root that others cannot
	// write to unless it is sticky; New refuses one that is not
	// (ErrHistoryFileRefused), and a later write to one is refused,
	// logged and counted (memmap.History.File). Close and
	// FlushHistoryFiles wait for a write in progress.
	// docs/allocation-history.md, "Reading it".
	HistoryFile string
	// NoHostCache turns off the cache of pinned host memory behind
	// HostAlloc (host_cache=false): every HostAlloc pins and every
	// HostBuffer.Close unpins, so both are refused during captures that
	// forbid unsafe calls. docs/host-memory.md.
	NoHostCache bool
	// MemoryLimit bounds the memory the allocator reserves from the
	// driver, in bytes (segments, expandable mappings, AllocSync buffers,
	// graph-owned memory and so graph pools): a request that would take
	// reserved over it climbs the reclaim ladder, then fails with
	// ErrOutOfMemory naming the limit. Zero: no limit (RMM's
	// limiting_resource_adaptor). docs/memory-pressure.md.
	MemoryLimit int64
	// MemoryFraction bounds it as a fraction, in (0, 1], of the device's
	// total memory as the driver reports it (driver.MemInfoer; New fails
	// with an error wrapping errors.ErrUnsupported where it cannot):
	// PyTorch's set_per_process_memory_fraction. With MemoryLimit too,
	// the smaller bound holds.
	MemoryFraction float64
	// GCThreshold, in (0, 1), starts proactive release: once reserved
	// memory grows past this fraction of the memory limit (of the
	// device's total without one), wholly free cached segments go back to
	// the driver, least recently used first, until it is under again
	// (PyTorch's garbage_collection_threshold). Zero: off.
	GCThreshold float64
	// OnOutOfMemory, when set, is called when an allocation (Alloc,
	// AllocSync, a workspace) is about to fail with ErrOutOfMemory, the
	// reclaim ladder climbed, outside the allocator's locks: it may Free
	// or Trim on the allocator; returning true tries the allocation once
	// more (RMM's failure_callback_resource_adaptor). One call at a time:
	// an out-of-memory while it runs, its own allocations included, fails
	// without calling it. During a capture the retry can only use what the
	// capture may: a pre-capture buffer freed is held by the capture.
	OnOutOfMemory func(OutOfMemoryInfo) (retry bool)
}

// maxHistory is the most events Options.History may keep: a ring of
// 1 GiB (256 B an event, each with its 24-frame stack). It bounds what a
// configuration string can make New allocate.
const maxHistory = 1 << 22

func (o Options) watchdog() time.Duration {
	switch {
	case o.Watchdog == 0:
		return DefaultWatchdog
	case o.Watchdog < 0:
		return 0
	}
	return o.Watchdog
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// WatchdogTimeout is the deadline the allocator's watchdog gives a blocking
// call (Options.Watchdog resolved: DefaultWatchdog for zero); zero when the
// watchdog is off. Libraries that run their own waits on the allocator's
// stream (nccl's) bound them by it.
func (a *Allocator) WatchdogTimeout() time.Duration { return a.guard.watchdog.timeout }
