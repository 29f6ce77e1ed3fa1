package alloc

import (
	"errors"
	"fmt"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// oomError is an allocation the device cannot hold, as a person reads it
// (PyTorch's "Tried to allocate ..." is the model): what was asked of which
// allocator, what the device has, what the allocator holds and the
// largest free block it has, the hints that can help (oomHints: each
// naming the CAPALLOC_ALLOC_CONF key or call that makes room), and the
// driver's own words. It matches
// ErrOutOfMemory and the driver's error (with whatever the reclaim ladder
// met), and says "out of device memory" once: the driver's error is quoted
// without the sentinel's text (docs/device-memory.md, "Out of memory").
type oomError struct {
	req           int64 // bytes asked for
	name, backend string
	total         int64 // the device's memory (DeviceInfo.TotalMemory)
	free          int64 // driver.MemInfoer's answer; -1 when the driver cannot tell
	stats         Stats
	largest       int64  // the largest free block of the pool
	wholeFree     int64  // bytes of wholly free segments still cached
	expandable    bool   // the allocator's segments are expandable already
	canExpand     bool   // its driver could make them so (driver.VirtualMemory)
	inCapture     bool   // the request was made inside a capture of the allocator
	pooled        bool   // ... into a graph pool
	why           string // the request never reached the driver: why
	cause         error  // the driver's error, joined with what the ladder met
	limit         int64  // the memory limit (limit.go); 0: none
	limitKey      string // the setting that made it
}

// outOfMemory is the error of an allocation of req bytes a's device
// cannot hold, after the reclaim ladder (or a request larger than the
// device: cause nil, why says so). It counts it, and reads a's figures of
// the moment. Caller holds a.mu.
func outOfMemory(a *Allocator, req int64, why string, cause error) error {
	via := viaAlloc
	if a.wsAlloc != "" {
		via = viaWorkspace
	}
	return outOfMemoryVia(a, req, via, why, cause)
}

// outOfMemoryVia is outOfMemory of a request made by the call via says
// (its history event's).
func outOfMemoryVia(a *Allocator, req int64, via eventVia, why string, cause error) error {
	a.stats.OutOfMemory++
	e := &oomError{req: req, name: a.name, backend: a.backend, total: a.info.TotalMemory, free: -1,
		stats: a.statsLocked(), expandable: a.vm != nil, canExpand: canExpand(a.drv), why: why, cause: cause,
		limit: a.stats.limit.max, limitKey: a.stats.limit.key}
	if c := a.guard.cap; c != nil {
		e.inCapture, e.pooled = true, c.pool != nil
	}
	if free := deviceFree(a.drv); free != nil {
		e.free = *free
	}
	w := walkMemory(a, false)
	e.largest, e.wholeFree = w.largestFree, w.sums[stCached]
	if h := a.stats.hist; h != nil {
		detail := why
		if detail == "" {
			detail = "driver out of memory after the reclaim ladder"
		}
		h.record(evOutOfMemory, 0, req, eventTag{via: via}, detail)
		dumpHistoryLocked(a)
	}
	return e
}

func (e *oomError) Error() string {
	var b strings.Builder
	size := memmap.SizeText
	fmt.Fprintf(&b, "%v: tried to allocate %s (%d B) in allocator %q (%s); device %s total", ErrOutOfMemory, size(e.req), e.req, e.name, e.backend, size(e.total))
	if e.free >= 0 {
		fmt.Fprintf(&b, ", %s free", size(e.free))
	}
	s := e.stats
	fmt.Fprintf(&b, "; this allocator: %s in use, %s reserved, %s of it cached, largest free block %s",
		size(s.BytesInUse), size(s.BytesReserved), size(s.BytesCached), size(e.largest))
	for _, h := range oomHints {
		if h.applies(e) {
			b.WriteString("; hint: " + h.text(e))
		}
	}
	if l := limitText(e.limit, e.limitKey); l != "" {
		b.WriteString("; " + l)
	}
	var refused *limitError
	switch {
	case e.cause == nil:
		b.WriteString("; " + e.why)
	case errors.As(e.cause, &refused):
		b.WriteString("; " + withoutSentinel(e.cause))
	default:
		b.WriteString("; driver: " + withoutSentinel(e.cause))
	}
	return b.String()
}

// oomHint is a remedy an out-of-memory error suggests where it can help
// (applies), said for the operator who runs the engine: the
// CAPALLOC_ALLOC_CONF key to set first, the Options field after. A remedy
// is a row: a key that comes to exist (a memory limit, a garbage
// collection threshold) becomes one more.
type oomHint struct {
	applies func(*oomError) bool
	text    func(*oomError) string
}

var oomHints = []oomHint{
	// Wholly free segments the ladder did not give back: a capture
	// allocates from the driver without climbing it, strict capture
	// safety stops its top rung.
	{func(e *oomError) bool { return e.wholeFree > 0 },
		func(e *oomError) string {
			return fmt.Sprintf("%s of wholly free segments is still cached: Trim, outside captures, gives it back to the driver", memmap.SizeText(e.wholeFree))
		}},
	// Free blocks that add up to the request but lie in pieces merge under
	// expandable segments: only where the driver can map memory, and only
	// outside captures (inside one the pool does not grow).
	{func(e *oomError) bool {
		return e.stats.BytesCached >= e.req && e.largest < e.req && !e.expandable && e.canExpand && !e.inCapture
	},
		func(e *oomError) string {
			return fmt.Sprintf("%s is cached, enough for the request but in pieces: expandable segments let free memory merge across segments: set CAPALLOC_ALLOC_CONF=expandable_segments:True (Options.ExpandableSegments)", memmap.SizeText(e.stats.BytesCached))
		}},
	// Inside a capture the allocator cannot grow its cache or give it
	// back: what the capture needs must be there before it begins.
	{func(e *oomError) bool { return e.inCapture && e.pooled },
		func(e *oomError) string {
			return "the request was made inside a capture into a graph pool, which neither the pool nor the allocator's cache could serve: run the step once eagerly, at its largest size, before capturing, so the cache holds what the captures need (docs/graph-pools.md)"
		}},
	{func(e *oomError) bool { return e.inCapture && !e.pooled },
		func(e *oomError) string {
			return fmt.Sprintf("the request was made inside a capture, which takes memory from the driver (%s stays cached meanwhile): warm up (run the step once eagerly) before capturing, and capture into a graph pool (CaptureOptions.Pool), whose captures take the cache's memory and share it (docs/graph-pools.md)", memmap.SizeText(e.stats.BytesCached))
		}},
}

func (e *oomError) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrOutOfMemory}
	}
	return []error{ErrOutOfMemory, e.cause}
}

// withoutSentinel is err's text without ErrOutOfMemory's, which drivers
// put first ("out of device memory: cpu: malloc ..."): the oomError says
// it once, first.
func withoutSentinel(err error) string {
	return strings.ReplaceAll(err.Error(), ErrOutOfMemory.Error()+": ", "")
}

// afterSyncLadder is AllocSync's error once its ladder is climbed, with
// a.mu not held: an out-of-memory becomes outOfMemory's (not one that
// Close cut short: that is ErrClosed's).
func afterSyncLadder(a *Allocator, req int64, err error) error {
	if !errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrClosed) {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return outOfMemoryVia(a, req, viaSync, "", err)
}

// canExpand reports whether drv can back expandable segments: it maps
// memory (driver.VirtualMemory) with a granularity (a wrapper over a
// driver without reports 0).
func canExpand(drv driver.Driver) bool {
	vm, ok := drv.(driver.VirtualMemory)
	return ok && vm.MapGranularity() > 0
}

// deviceFree is the device's free memory when drv can tell
// (driver.MemInfoer), else nil.
func deviceFree(drv driver.Driver) *int64 {
	if mi, ok := drv.(driver.MemInfoer); ok {
		if free, _, err := mi.MemInfo(); err == nil {
			return &free
		}
	}
	return nil
}
