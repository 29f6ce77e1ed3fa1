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
// largest free block it has, a hint when its cache would have held the
// request had it been one piece, and the driver's own words. It matches
// ErrOutOfMemory and the driver's error (with whatever the reclaim ladder
// met), and says "out of device memory" once: the driver's error is quoted
// without the sentinel's text (docs/device-memory.md, "Out of memory").
type oomError struct {
	req           int64 // bytes asked for
	name, backend string
	total         int64 // the device's memory (DeviceInfo.TotalMemory)
	free          int64 // driver.MemInfoer's answer; -1 when the driver cannot tell
	stats         Stats
	largest       int64 // the largest free block of the pool
	wholeFree     int64 // bytes of wholly free segments still cached
	expandable    bool
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
	a.stats.OutOfMemory++
	e := &oomError{req: req, name: a.name, backend: a.backend, total: a.info.TotalMemory, free: -1,
		stats: a.statsLocked(), expandable: a.vm != nil, why: why, cause: cause,
		limit: a.stats.limit.max, limitKey: a.stats.limit.key}
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
		h.record(evOutOfMemory, 0, req, stateNone, detail)
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
	if h := e.hint(); h != "" {
		b.WriteString("; hint: " + h)
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

// hint says what would have made room: wholly free segments the ladder
// did not give back (a capture allocates from the driver without climbing
// it, strict capture safety stops its top rung) go back with Trim; free
// blocks that add up to the request but are in pieces merge under
// expandable segments.
func (e *oomError) hint() string {
	cached := e.stats.BytesCached
	switch {
	case e.wholeFree > 0:
		return fmt.Sprintf("%s of wholly free segments is still cached: Trim, outside captures, gives it back to the driver", memmap.SizeText(e.wholeFree))
	case cached >= e.req && e.largest < e.req && !e.expandable:
		return fmt.Sprintf("%s is cached, enough for the request but in pieces: expandable segments let free memory merge across segments (Options.ExpandableSegments)", memmap.SizeText(cached))
	}
	return ""
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
	return outOfMemory(a, req, "", err)
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
