package alloc

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// memLimit is the allocator's bound on the memory it reserves
// (Options.MemoryLimit, Options.MemoryFraction): segments, expandable
// mappings, AllocSync buffers and graph-owned memory, checked before each
// driver call that would reserve more, so it holds on every backend and
// in plugin mode alike (the driver never sees a request over it). A
// refusal is an out-of-memory like the driver's: the reclaim ladder
// climbs it the same way, and what the ladder gives back makes room.
type memLimit struct {
	max int64  // bytes; 0: no limit
	key string // the setting that made max, for the error: "memory_limit=64 MiB"
	// held is what is reserved, and what is being reserved by a driver
	// call in flight (AllocSync's Malloc, made without a.mu): taken before
	// the call, put back when it fails or the memory is given back.
	held atomic.Int64
}

// limitError is a request the limit refused before the driver saw it. It
// matches ErrOutOfMemory, so the reclaim ladder climbs it.
type limitError struct {
	req, held, max int64
	key            string
}

func (e *limitError) Error() string {
	size := memmap.SizeText
	return fmt.Sprintf("%v: the allocator's memory limit (%s) refused %s more: %s of %s reserved",
		ErrOutOfMemory, e.key, size(e.req), size(e.held), size(e.max))
}

func (e *limitError) Unwrap() error { return ErrOutOfMemory }

// take counts n more bytes reserved, or refuses them with a *limitError
// when they would take reserved over the limit.
func (l *memLimit) take(n int64) error {
	if l.max == 0 {
		return nil
	}
	for {
		h := l.held.Load()
		if h+n > l.max {
			return &limitError{req: n, held: h, max: l.max, key: l.key}
		}
		if l.held.CompareAndSwap(h, h+n) {
			return nil
		}
	}
}

// put counts n bytes as no longer reserved: given back, or a driver call
// take allowed that failed.
func (l *memLimit) put(n int64) {
	if l.max != 0 {
		l.held.Add(-n)
	}
}

// limitOf is the limit opts set for drv, and the setting that made it:
// the smaller of MemoryLimit and MemoryFraction of the device's total
// (driver.MemInfoer), or 0 for none. A fraction the driver cannot size is
// an error wrapping errors.ErrUnsupported; a negative limit or a fraction
// outside (0, 1] one wrapping ErrInvalidValue.
func limitOf(drv driver.Driver, opts Options) (limit int64, key string, err error) {
	if opts.MemoryLimit < 0 {
		return 0, "", wrapf(ErrInvalidValue, "memory limit %d B is negative", opts.MemoryLimit)
	}
	if opts.MemoryLimit > 0 {
		limit, key = opts.MemoryLimit, "memory_limit="+memmap.SizeText(opts.MemoryLimit)
	}
	f := opts.MemoryFraction
	if f == 0 {
		return limit, key, nil
	}
	if !(f > 0 && f <= 1) {
		return 0, "", wrapf(ErrInvalidValue, "memory fraction %v is not in (0, 1]", f)
	}
	total, err := deviceTotal(drv)
	if err != nil {
		return 0, "", fmt.Errorf("%w: memory_fraction needs the device's total memory from the driver (driver.MemInfoer); backend %s cannot say: %w", errors.ErrUnsupported, drv.Name(), err)
	}
	if n := max(int64(f*float64(total)), 1); limit == 0 || n < limit {
		limit = n
		key = "memory_fraction=" + strconv.FormatFloat(f, 'g', -1, 64) + " of the device's " + memmap.SizeText(total)
	}
	return limit, key, nil
}

// errNoMemInfo: the driver does not implement driver.MemInfoer.
var errNoMemInfo = errors.New("no driver.MemInfoer")

// deviceTotal is the device's total memory as the driver reports it.
func deviceTotal(drv driver.Driver) (int64, error) {
	mi, ok := drv.(driver.MemInfoer)
	if !ok {
		return 0, errNoMemInfo
	}
	_, total, err := mi.MemInfo()
	if err == nil && total <= 0 {
		err = fmt.Errorf("it reports a total of %d B", total)
	}
	return total, err
}

// limitText is the part of an out-of-memory message that names the limit
// and the key that sets it, or "" when there is none.
func limitText(max int64, key string) string {
	if max == 0 {
		return ""
	}
	return fmt.Sprintf("memory limit %s reserved at most, set by %s (CAPALLOC_ALLOC_CONF; Options.MemoryLimit, Options.MemoryFraction)", memmap.SizeText(max), key)
}

// mallocSync is AllocSync's driver allocation, made without a.mu: the
// limit's share is taken first (atomically: another AllocSync may be in
// flight) and put back when the driver refuses.
func mallocSync(a *Allocator, n int64) (driver.DevicePtr, error) {
	if err := a.stats.limit.take(n); err != nil {
		return 0, err
	}
	p, err := a.drv.Malloc(n)
	if err != nil {
		a.stats.limit.put(n)
	}
	return p, err
}
