package cpu

import (
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
func (d *Driver) pinned(b []byte) bool { return d.hosts.Holds(b) }

func (r hostRegion) Start() uintptr { return r.start }
func (r hostRegion) Len() int       { return len(r.buf) }

// HostAlloc returns "pinned" host memory: ordinary Go memory (or memory from
// Options.HostMemory), counted and registered so the async copies can tell
// it from pageable memory.
func (d *Driver) HostAlloc(size int64) ([]byte, error) { return d.hostAlloc(size, driver.Global) }

func (d *Driver) hostAlloc(size int64, interaction driver.CaptureMode) ([]byte, error) {
	const what = "host alloc"
	if err := d.lockHostCall(what, interaction); err != nil {
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
	d.hosts.Insert(hostRegion{start: addr(b), buf: b})
	return b, nil
}

// HostFree releases a HostAlloc buffer, passed exactly as returned. Like
// cudaFreeHost it first waits for queued work, which may still use it.
func (d *Driver) HostFree(b []byte) error { return d.hostFree(b, driver.Global) }

func (d *Driver) hostFree(b []byte, interaction driver.CaptureMode) error {
	const what = "host free"
	if err := d.lockHostCall(what, interaction); err != nil {
		return err
	}
	r, ok := d.removeHostLocked(b, false)
	if !ok {
		d.mu.Unlock()
		return errf(driver.ErrInvalidValue, "%s %#x (%d B): not a buffer from HostAlloc, or already freed", what, addr(b), len(b))
	}
	d.hostLive -= int64(len(b))
	d.mu.Unlock()
	d.drainAll() // queued work may still use the memory
	return d.dropHost(r.buf)
}

// lockHostCall opens a host-memory call: it fails on a closed driver, on
// the GB10 profile's hang and on a Global-mode capture the call would
// invalidate. On success d.mu is held; on an error it is not.
func (d *Driver) lockHostCall(what string, interaction driver.CaptureMode) error {
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
	return nil
}

// removeHostLocked takes b out of the pinned set if it is, exactly, a
// HostAlloc buffer (reg false) or a registered one (reg true); managed
// memory's host views leave only through FreeManaged. d.mu held.
func (d *Driver) removeHostLocked(b []byte, reg bool) (hostRegion, bool) {
	return d.hosts.RemoveWhere(func(r hostRegion) bool {
		return r.reg == reg && r.managed == 0 && len(b) > 0 && r.start == addr(b) && len(r.buf) == len(b)
	})
}

// newHost backs a HostAlloc: supplied memory (Options.HostMemory) or the Go
// heap.
func (d *Driver) newHost(size int64) ([]byte, error) { return newFrom(d.hostMem, "host", size) }

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
