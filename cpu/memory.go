package cpu

import (
	"fmt"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// allocation is one device allocation. buf and size never change after it is
// published, so queued work can hold the record and use it without a lock;
// only dead is read concurrently, to catch work that runs after a free.
type allocation struct {
	id   uint32
	buf  []byte
	size int64
	acct int64 // size rounded up to Alignment, what the limit counts
	dead atomic.Bool
	// vm is set on a reservation (ReserveAddress): buf is the whole
	// reserved range, of which only mapped chunks may be touched, with
	// Driver.vmMu read-held (see Driver.lockVM).
	vm *reservation

	// Guarded by Driver.mu.
	freeQueued bool     // Free or a stream-ordered FreeAsync was issued
	cap        *capture // allocated by this capture, which has not ended yet
	freedIn    *capture // a free node for it was recorded in this capture
	// freedOn is the stream whose queue holds this allocation's FreeAsync,
	// not run yet, while a MallocAsync there may still reuse its bytes
	// (reuseFreedLocked); nil once they are reused or released.
	freedOn *stream
	// Allocated by this graph's allocation node: its address is baked into
	// the graph, so it stays reserved while the graph or its instantiation
	// lives, whoever "frees" it.
	graph      *graph
	graphFreed bool // the graph frees it itself
	// Not graphFreed: a launch allocated it (CUDA's lifetime starts when the
	// allocation node runs) and nobody freed it since.
	materialized bool
}

func (a *allocation) base() driver.DevicePtr { return driver.DevicePtr(uint64(a.id) << offsetBits) }

// span is the backing bytes of [off, off+n); bounds were checked when the
// operation was enqueued, so only a free (or an unmap) since then can make
// it fail. In a reservation, the caller holds Driver.vmMu read-locked for
// as long as it uses the bytes.
func (a *allocation) span(off, n int64, what string) ([]byte, error) {
	if a.dead.Load() {
		return nil, errf(driver.ErrInvalidValue, "%s: allocation %#x was freed before the stream reached this operation",
			what, uint64(a.base()))
	}
	if a.vm != nil && !a.vm.covers(off, n) {
		return nil, errf(driver.ErrInvalidValue, "%s %#x+%d: not mapped (unmapped before the stream reached this operation)",
			what, uint64(a.base())+uint64(off), n)
	}
	return a.buf[off : off+n : off+n], nil
}

// idTable maps allocation ids to records. The slice header is immutable (a
// bigger table replaces it); slots are shared between generations, so a
// lookup is two atomic loads and an index.
type idTable struct {
	slots []*idSlot
}

type idSlot struct {
	rec atomic.Pointer[allocation]
}

// takeIDLocked pops the oldest free id, doubling the table when none is left.
func (d *Driver) takeIDLocked() (uint32, bool) {
	if d.freeHead == len(d.freeIDs) {
		old := d.table.Load().slots
		n := max(2*len(old), 64)
		if n > maxIDs {
			n = maxIDs
		}
		if n <= len(old) {
			return 0, false
		}
		slots := make([]*idSlot, n)
		copy(slots, old)
		first := max(len(old), 1) // id 0 is never used: address 0 stays invalid
		for i := len(old); i < n; i++ {
			slots[i] = &idSlot{}
		}
		d.freeIDs, d.freeHead = d.freeIDs[:0], 0
		for i := first; i < n; i++ {
			d.freeIDs = append(d.freeIDs, uint32(i))
		}
		d.table.Store(&idTable{slots: slots})
	}
	id := d.freeIDs[d.freeHead]
	d.freeHead++
	if d.freeHead == len(d.freeIDs) {
		d.freeIDs, d.freeHead = d.freeIDs[:0], 0
	} else if d.freeHead >= 1024 && d.freeHead*2 >= len(d.freeIDs) {
		n := copy(d.freeIDs, d.freeIDs[d.freeHead:])
		d.freeIDs, d.freeHead = d.freeIDs[:n], 0
	}
	return id, true
}

// newAllocation reserves, backs and publishes an allocation. unsafeCall marks a
// synchronous device-wide call (Malloc) by a caller in that interaction mode;
// c, when set, is the capture that will own the memory; on, when set, is
// the stream of a stream-ordered allocation, whose queued frees it may
// reuse (reuseFreedLocked). d.mu must not be held.
func (d *Driver) newAllocation(size int64, c *capture, on *stream, unsafeCall *driver.CaptureMode, what string) (*allocation, error) {
	d.mu.Lock()
	if d.closed.Load() {
		d.mu.Unlock()
		return nil, errClosed(what)
	}
	if unsafeCall != nil {
		err := d.hangLocked(what)
		if err == nil {
			err = d.refuseUnsafeLocked(what, *unsafeCall)
		}
		if err != nil {
			d.mu.Unlock()
			return nil, err
		}
	}
	if size <= 0 {
		d.mu.Unlock()
		return nil, errf(driver.ErrInvalidValue, "%s: size %d", what, size)
	}
	acct := (size + Alignment - 1) &^ (Alignment - 1)
	if on != nil && size <= maxAllocationSize && acct > d.limit-d.live {
		d.reuseFreedLocked(on, acct-(d.limit-d.live))
	}
	if size > maxAllocationSize || acct > d.limit-d.live {
		live, n := d.live, d.liveCount
		d.mu.Unlock()
		return nil, errf(driver.ErrOutOfMemory, "%s %d B: %d of %d B in use by %d allocations",
			what, size, live, d.limit, n)
	}
	id, ok := d.takeIDLocked()
	if !ok {
		d.mu.Unlock()
		return nil, errf(driver.ErrOutOfMemory, "%s %d B: all %d allocation ids in use", what, size, maxIDs-1)
	}
	d.live += acct
	d.liveCount++
	d.mu.Unlock()

	// Zeroing a large buffer takes a while: do it without the device lock.
	buf, err := d.newDevice(size)
	if err != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.closed.Load() {
			d.freeIDs = append(d.freeIDs, id)
			d.live -= acct
			d.liveCount--
		}
		return nil, errf(driver.ErrOutOfMemory, "%s %d B: %v", what, size, err)
	}
	r := &allocation{id: id, buf: buf, size: size, acct: acct}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		d.dropDevice(buf)
		return nil, errClosed(what) // Close reset the table and the accounting
	}
	if c != nil && c.state != captureActive {
		d.freeIDs = append(d.freeIDs, id)
		d.live -= acct
		d.liveCount--
		d.dropDevice(buf)
		return nil, c.invalidatedErr(what)
	}
	r.cap = c
	if c != nil {
		c.allocs = append(c.allocs, r)
	}
	d.table.Load().slots[id].rec.Store(r)
	return r, nil
}

// reuseFreedLocked makes room for a stream-ordered allocation on s that
// lacks need bytes, as a CUDA pool reuses a stream's own frees at once
// (an allocation on s is ordered after every free queued there before
// it; the fake runtimes' pools do the same): the bytes of the oldest
// frees queued on s, not run yet, stop counting against the limit, as
// many as make room. The freed allocations themselves stay until their
// frees run, for the work queued before them. It takes nothing when
// even all of them would not make room. d.mu held.
func (d *Driver) reuseFreedLocked(s *stream, need int64) {
	if s.freedBytes < need {
		return
	}
	for need > 0 {
		r := s.freed[0]
		s.freed[0] = nil
		s.freed = s.freed[1:]
		if r.freedOn != s { // released already
			continue
		}
		r.freedOn = nil
		s.freedBytes -= r.acct
		d.live -= r.acct
		need -= r.acct
		r.acct = 0
	}
}

// releaseLocked returns an allocation's id and bytes. Idempotent. d.mu held.
func (d *Driver) releaseLocked(r *allocation) {
	if r.dead.Swap(true) {
		return
	}
	if s := r.freedOn; s != nil { // its queued free ran: nothing left to reuse
		r.freedOn = nil
		s.freedBytes -= r.acct
		for len(s.freed) > 0 && s.freed[0].freedOn != s {
			s.freed[0] = nil
			s.freed = s.freed[1:]
		}
	}
	t := d.table.Load()
	if int(r.id) < len(t.slots) && t.slots[r.id].rec.Load() == r {
		t.slots[r.id].rec.Store(nil)
		d.freeIDs = append(d.freeIDs, r.id)
	}
	d.live -= r.acct
	d.liveCount--
	d.dropDevice(r.buf)
}

// newDevice backs a device allocation: supplied memory (Options.DeviceMemory)
// or the Go heap. Either way the bytes start zeroed.
func (d *Driver) newDevice(size int64) ([]byte, error) { return newFrom(d.devMem, "device", size) }

// newFrom is size bytes from mem, a supplier of the kind what names
// ("device", "host"), or from the Go heap when mem is nil; zeroed either
// way. A supplier that returns another size gets its slice back.
func newFrom(mem driver.HostMemory, what string, size int64) ([]byte, error) {
	if mem == nil {
		return make([]byte, size), nil
	}
	b, err := mem.Alloc(size)
	if err == nil && int64(len(b)) != size {
		_ = mem.Free(b)
		return nil, fmt.Errorf("%s memory supplier returned %d B for %d B", what, len(b), size)
	}
	return b, err
}

// dropDevice gives supplied memory back once an allocation is released; Go
// heap memory is the GC's. Released allocations are dead, so queued work
// that still names one fails before touching its bytes; a use racing the
// release itself is the caller's use-after-free, as on a device. The
// supplier only refuses slices it did not hand out, which a released
// allocation's never is, so its error has nowhere useful to go.
func (d *Driver) dropDevice(b []byte) {
	if d.devMem != nil {
		_ = d.devMem.Free(b)
	}
}

// checkUserFreeLocked says why p cannot be freed by Free or an ordinary
// FreeAsync, or returns its allocation. d.mu held.
func (d *Driver) checkUserFreeLocked(p driver.DevicePtr, what string) (*allocation, error) {
	r := d.baseLocked(p)
	switch {
	case r == nil:
		return nil, errf(driver.ErrInvalidValue, "%s %#x: not the base address of a live allocation", what, uint64(p))
	case r.vm != nil:
		return nil, errf(driver.ErrInvalidValue, "%s %#x: an address reservation (ReleaseAddress gives it back)", what, uint64(p))
	case r.freeQueued:
		return nil, errf(driver.ErrInvalidValue, "%s %#x: already freed", what, uint64(p))
	case r.cap != nil:
		return nil, errf(driver.ErrInvalidValue, "%s %#x: owned by a stream capture that has not ended", what, uint64(p))
	case r.graph != nil && r.graphFreed:
		return nil, errf(driver.ErrInvalidValue, "%s %#x: freed inside a graph, which owns it until destroyed", what, uint64(p))
	case r.graph != nil && !r.materialized:
		return nil, errf(driver.ErrInvalidValue, "%s %#x: graph allocation not allocated (graph not launched since it was last freed)",
			what, uint64(p))
	}
	return r, nil
}

// userFreeLocked frees r for Free or FreeAsync. A graph allocation only ends
// its lifetime: the address stays reserved for the graph's next launch. It
// returns whether r must still be released. d.mu held.
func userFreeLocked(r *allocation) bool {
	if r.graph != nil {
		r.materialized = false
		return false
	}
	r.freeQueued = true
	return true
}

// Malloc is cudaMalloc: synchronous, device wide, refused during a Global
// capture. Memory whose stream-ordered free has not run yet is not free
// for it (as memory a CUDA pool keeps is not for cudaMalloc): the caller
// synchronizes first.
func (d *Driver) Malloc(size int64) (driver.DevicePtr, error) { return d.malloc(size, driver.Global) }

func (d *Driver) malloc(size int64, interaction driver.CaptureMode) (driver.DevicePtr, error) {
	if d.closed.Load() {
		return 0, errClosed("malloc")
	}
	r, err := d.newAllocation(size, nil, nil, &interaction, "malloc")
	if err != nil {
		return 0, err
	}
	return r.base(), nil
}

// Free is cudaFree: it waits for all queued work on the device (which may
// still use p) and then releases p (a graph allocation: as FreeAsync).
func (d *Driver) Free(p driver.DevicePtr) error { return d.free(p, driver.Global) }

func (d *Driver) free(p driver.DevicePtr, interaction driver.CaptureMode) error {
	if d.closed.Load() {
		return errClosed("free")
	}
	d.mu.Lock()
	err := d.hangLocked("free")
	if err == nil {
		err = d.refuseUnsafeLocked("free", interaction)
	}
	if err != nil {
		d.mu.Unlock()
		return err
	}
	r, err := d.checkUserFreeLocked(p, "free")
	if err != nil {
		d.mu.Unlock()
		return err
	}
	release := userFreeLocked(r)
	d.mu.Unlock()
	d.drainAll()
	if release {
		d.mu.Lock()
		d.releaseLocked(r)
		d.mu.Unlock()
	}
	return nil
}

// MallocAsync returns an address usable at once by work on s. On a capturing
// stream it is a graph allocation node: the memory is backed now, its address
// is baked into the graph, and the capture (later the graph) owns it.
// Outside capture it may reuse the memory of frees queued on s
// (reuseFreedLocked).
func (d *Driver) MallocAsync(size int64, h driver.Stream) (driver.DevicePtr, error) {
	if d.closed.Load() {
		return 0, errClosed("malloc async")
	}
	s, err := d.stream(h, "malloc async")
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return 0, errDestroyed(h, "malloc async")
	}
	if c := s.cap; c != nil {
		defer s.mu.Unlock()
		d.mu.Lock()
		if c.state != captureActive {
			err := c.invalidatedErr("malloc async")
			d.mu.Unlock()
			return 0, err
		}
		d.mu.Unlock()
		r, err := d.newAllocation(size, c, nil, nil, "malloc async (capture)")
		if err != nil {
			return 0, d.captureFailed(c, err)
		}
		return r.base(), nil
	}
	s.mu.Unlock()
	r, err := d.newAllocation(size, nil, s, nil, "malloc async")
	if err != nil {
		return 0, err
	}
	return r.base(), nil
}

// FreeAsync is stream ordered: the memory is released when the queue reaches
// it. On a capturing stream it is a free node and only accepts memory
// allocated by the same capture; that memory stays reserved until the graph
// is destroyed, because its address is baked into the graph. Outside capture,
// freeing a graph allocation a launch made ends its lifetime but keeps the
// address reserved for the graph's next launch.
func (d *Driver) FreeAsync(p driver.DevicePtr, h driver.Stream) error {
	if d.closed.Load() {
		return errClosed("free async")
	}
	s, err := d.stream(h, "free async")
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return errDestroyed(h, "free async")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c := s.cap; c != nil {
		if c.state != captureActive {
			return c.invalidatedErr("free async")
		}
		r := d.baseLocked(p)
		if r == nil || r.cap != c || r.freedIn != nil {
			err := errf(driver.ErrInvalidValue,
				"free async %#x on capturing stream %#x: not an allocation made, and not yet freed, in this capture",
				uint64(p), uint64(h))
			c.invalidateLocked(err)
			return err
		}
		r.freedIn = c
		return nil
	}
	r, err := d.checkUserFreeLocked(p, "free async")
	if err != nil {
		return err
	}
	if userFreeLocked(r) {
		s.queue = append(s.queue, op{kind: opFree, dst: r})
		r.freedOn = s
		s.freed = append(s.freed, r)
		s.freedBytes += r.acct
	}
	return nil
}
