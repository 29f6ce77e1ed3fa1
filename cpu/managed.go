package cpu

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

var _ driver.ManagedMemory = (*Driver)(nil)

// MallocManaged is cudaMallocManaged (global attach): a device allocation,
// counted against the device's memory like Malloc's, whose bytes are also
// its host view, in the pinned set so the async copies take it. Unsafe,
// as Malloc.
func (d *Driver) MallocManaged(size int64) (driver.DevicePtr, []byte, error) {
	return d.mallocManaged(size, driver.Global)
}

func (d *Driver) mallocManaged(size int64, interaction driver.CaptureMode) (driver.DevicePtr, []byte, error) {
	const what = "malloc managed"
	if d.closed.Load() {
		return 0, nil, errClosed(what)
	}
	r, err := d.newAllocation(size, nil, nil, &interaction, what)
	if err != nil {
		return 0, nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts.Insert(hostRegion{start: addr(r.buf), buf: r.buf, managed: r.base()})
	return r.base(), r.buf, nil
}

// FreeManaged is cudaFree of managed memory: it leaves the pinned set and
// is freed as Free frees (after queued work).
func (d *Driver) FreeManaged(p driver.DevicePtr) error { return d.freeManaged(p, driver.Global) }

func (d *Driver) freeManaged(p driver.DevicePtr, interaction driver.CaptureMode) error {
	const what = "free managed"
	if d.closed.Load() {
		return errClosed(what)
	}
	d.mu.Lock()
	if !d.hosts.Any(func(r hostRegion) bool { return r.managed == p && p != 0 }) {
		d.mu.Unlock()
		return errf(driver.ErrInvalidValue, "%s %#x: not managed memory from MallocManaged, or already freed", what, uint64(p))
	}
	d.mu.Unlock()
	if err := d.free(p, interaction); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts.RemoveWhere(func(r hostRegion) bool { return r.managed == p })
	return nil
}

// PrefetchManaged queues a prefetch of [p, p+n) on h: a stream operation
// (captured like any other on a capturing stream) that moves nothing, the
// device being the host, and fails at its turn if the memory was freed.
func (d *Driver) PrefetchManaged(p driver.DevicePtr, n int64, toHost bool, h driver.Stream) error {
	const what = "prefetch managed memory"
	if d.closed.Load() {
		return errClosed(what)
	}
	s, err := d.stream(h, what)
	if err != nil {
		return err
	}
	r, off, why := d.resolve(p, n)
	if why == "" && !d.hosts.Any(func(hr hostRegion) bool { return hr.managed == r.base() }) {
		why = "not managed memory"
	}
	if why != "" {
		return d.badRange(s, what, p, n, why)
	}
	if n == 0 {
		return d.noop(s, what)
	}
	o := op{kind: opPrefetch, n: n, dst: r, dstOff: off}
	return d.submit(s, &o, what)
}
