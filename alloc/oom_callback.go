package alloc

import "errors"

// OutOfMemoryInfo is what Options.OnOutOfMemory is told of an allocation
// about to fail: the request, the allocator, its figures once the reclaim
// ladder was climbed, and whether a capture of the allocator's records.
type OutOfMemoryInfo struct {
	Allocator *Allocator
	Op        string // "Alloc", "AllocSync", "Workspace"
	Size      int64  // bytes asked for
	InUse     int64  // Stats.BytesInUse
	Reserved  int64  // Stats.BytesReserved
	Limit     int64  // Stats.MemoryLimit: 0 when there is none
	// Capturing: the allocation was made in a capture of the allocator's.
	// A retry then serves it only from what the capture may use: its graph
	// pool's free blocks and the driver; a buffer from before the capture
	// that the callback frees is held by the capture until the graph
	// closes, so it makes no room.
	Capturing bool
	Err       error // the error the allocation returns if there is no retry
}

// afterOutOfMemory is an allocation's error err once the ladder is
// climbed: when it is an out-of-memory and OnOutOfMemory is set and not
// running, the callback is called, with no lock of the allocator's held,
// and when it asks for it the allocation is made again (again: the
// exported call, its per-P cache included, where the callback's frees
// land) once. The flag that keeps the callback to one call at a time is
// up until the retry returns, so neither the callback's own allocations
// nor the retry call it again.
func afterOutOfMemory(a *Allocator, op string, size int64, err error, again func() (Buffer, error)) (Buffer, error) {
	cb := a.opts.OnOutOfMemory
	if cb == nil || !errors.Is(err, ErrOutOfMemory) || !a.oomCalling.CompareAndSwap(false, true) {
		return Buffer{}, err
	}
	defer a.oomCalling.Store(false)
	info := OutOfMemoryInfo{Allocator: a, Op: op, Size: size, Err: err}
	var e *Error
	if errors.As(err, &e) {
		info.Capturing = e.State != StateNone
	}
	st := a.Stats()
	info.InUse, info.Reserved, info.Limit = st.BytesInUse, st.BytesReserved, st.MemoryLimit
	if !cb(info) {
		return Buffer{}, err
	}
	return again()
}
