package cpu

import (
	"fmt"
	"slices"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/hostregion"
)

// hostRegion is one HostAlloc buffer. The Go heap does not move objects, so
// its address identifies it; buf keeps it alive while registered.
type hostRegion struct {
	start uintptr
	buf   []byte
	reg   bool // registered by HostRegister (hostreg.go): the caller's memory
	// managed is the device address of managed memory (managed.go) whose
	// host view this is; 0 for pinned and registered memory.
	managed driver.DevicePtr
}

func addr(b []byte) uintptr { return hostregion.Addr(b) }

// pinned reports whether b lies inside one HostAlloc buffer. The async copies
// use it to apply CUDA's pageable-memory rules.
func (d *Driver) pinned(b []byte) bool {
	i, _ := hostregion.Find(*d.hosts.Load(), hostRegion.begin, hostRegion.size, b)
	return i >= 0
}

func (r hostRegion) begin() uintptr { return r.start }
func (r hostRegion) size() uintptr  { return uintptr(len(r.buf)) }

// HostAlloc returns "pinned" host memory: ordinary Go memory (or memory from
// Options.HostMemory), counted and registered so the async copies can tell
// it from pageable memory.
func (d *Driver) HostAlloc(size int64) ([]byte, error) { return d.hostAlloc(size, driver.Global) }

func (d *Driver) hostAlloc(size int64, interaction driver.CaptureMode) ([]byte, error) {
	const what = "host alloc"
	if d.closed.Load() {
		return nil, errClosed(what)
	}
	d.mu.Lock()
	if err := d.hangLocked(what); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if err := d.refuseUnsafeLocked(what, interaction); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if size <= 0 {
		d.mu.Unlock()
		return nil, errf(driver.ErrInvalidValue, "%s: size %d", what, size)
	}
	if size > d.hostLimit-d.hostLive {
		live := d.hostLive
		d.mu.Unlock()
		return nil, errf(driver.ErrOutOfMemory, "%s %d B: %d of %d B of pinned host memory in use", what, size, live, d.hostLimit)
	}
	d.hostLive += size
	d.mu.Unlock()

	b, err := d.newHost(size)
	if err != nil {
		d.mu.Lock()
		d.hostLive -= size
		d.mu.Unlock()
		return nil, errf(driver.ErrOutOfMemory, "%s %d B: %v", what, size, err)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		d.dropHost(b)
		return nil, errClosed(what)
	}
	d.insertHostLocked(hostRegion{start: addr(b), buf: b})
	return b, nil
}

// insertHostLocked adds r to the pinned regions, in address order.
// Caller holds d.mu.
func (d *Driver) insertHostLocked(r hostRegion) {
	rs := *d.hosts.Load()
	i, _ := slices.BinarySearchFunc(rs, r.start, func(r hostRegion, p uintptr) int {
		if r.start < p {
			return -1
		}
		return 1
	})
	rs = slices.Insert(slices.Clip(rs), i, r)
	d.hosts.Store(&rs)
}

// HostFree releases a HostAlloc buffer, passed exactly as returned. Like
// cudaFreeHost it first waits for queued work, which may still use it.
func (d *Driver) HostFree(b []byte) error { return d.hostFree(b, driver.Global) }

func (d *Driver) hostFree(b []byte, interaction driver.CaptureMode) error {
	const what = "host free"
	if d.closed.Load() {
		return errClosed(what)
	}
	d.mu.Lock()
	if err := d.hangLocked(what); err != nil {
		d.mu.Unlock()
		return err
	}
	if err := d.refuseUnsafeLocked(what, interaction); err != nil {
		d.mu.Unlock()
		return err
	}
	rs := *d.hosts.Load()
	i := -1
	if len(b) > 0 {
		i = slices.IndexFunc(rs, func(r hostRegion) bool { return r.start == addr(b) && len(r.buf) == len(b) && !r.reg && r.managed == 0 })
	}
	if i < 0 {
		d.mu.Unlock()
		return errf(driver.ErrInvalidValue, "%s %#x (%d B): not a buffer from HostAlloc, or already freed", what, addr(b), len(b))
	}
	r := rs[i]
	rs = slices.Delete(slices.Clone(rs), i, i+1)
	d.hosts.Store(&rs)
	d.hostLive -= int64(len(b))
	d.mu.Unlock()
	d.drainAll() // queued work may still use the memory
	return d.dropHost(r.buf)
}

// newHost backs a HostAlloc: supplied memory (Options.HostMemory) or the Go
// heap.
func (d *Driver) newHost(size int64) ([]byte, error) {
	if d.hostMem == nil {
		return make([]byte, size), nil
	}
	b, err := d.hostMem.Alloc(size)
	if err == nil && int64(len(b)) != size {
		_ = d.hostMem.Free(b)
		return nil, fmt.Errorf("host memory supplier returned %d B for %d B", len(b), size)
	}
	return b, err
}

// dropHost gives supplied memory back; Go heap memory is the GC's.
func (d *Driver) dropHost(b []byte) error {
	if d.hostMem == nil {
		return nil
	}
	if err := d.hostMem.Free(b); err != nil {
		return errf(driver.ErrDriver, "host free: returning %d B to the host memory supplier: %v", len(b), err)
	}
	return nil
}
