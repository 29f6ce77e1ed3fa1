package cpu

import (
	"cmp"
	"slices"

	"github.com/capalloc/capalloc/alloc/driver"
)

// VMGranularity is the unit of the cpu driver's reservations and mappings
// (driver.VirtualMemory). Any page multiple would work; 2 MiB is what CUDA
// reports as the recommended granularity on current GPUs, so a pool growing
// on cpu rounds, and fragments, the way it will on a device.
const VMGranularity int64 = 2 << 20

// reservation is the mapped state of an allocation made by ReserveAddress:
// the allocation's buf is the whole reserved range, inaccessible except
// where a MapMemory call mapped a chunk.
type reservation struct {
	maps   []vmRange // sorted by offset, never overlapping; Driver.vmMu
	mapped int64     // bytes mapped, counted in Driver.live; Driver.vmMu
}

// vmRange is one MapMemory call's range, as offsets into the reservation.
type vmRange struct{ off, size int64 }

func (v vmRange) end() int64 { return v.off + v.size }

// first is the index of the first range ending after off.
func (v *reservation) first(off int64) int {
	i, _ := slices.BinarySearchFunc(v.maps, off, func(m vmRange, off int64) int {
		if m.end() <= off {
			return -1
		}
		return 1
	})
	return i
}

// covers reports whether [off, off+n) lies in mapped chunks, adjacent
// mapped chunks together. vmMu held (either way).
func (v *reservation) covers(off, n int64) bool {
	at, end := off, off+n
	for i := v.first(off); at < end; i++ {
		if i == len(v.maps) || v.maps[i].off > at {
			return false
		}
		at = v.maps[i].end()
	}
	return true
}

// vmAvailable reports whether this driver offers virtual memory: on Linux,
// and only when device memory is the driver's own. Options.DeviceMemory
// promises that every device byte comes from the supplier (the plugin
// server shares it with the host through DirectSpan); a reservation's
// chunks cannot, so a driver with a supplier refuses them.
func (d *Driver) vmAvailable(what string) error {
	if !vmSupported {
		return errNoVM(what)
	}
	if d.devMem != nil {
		return errf(driver.ErrBackendUnavailable,
			"%s: no virtual memory when device memory is supplied (Options.DeviceMemory): chunks could not be shared", what)
	}
	return nil
}

// MapGranularity is VMGranularity, or 0 where the driver does not offer
// virtual memory (not Linux, or Options.DeviceMemory set): then every
// other VirtualMemory method fails with ErrBackendUnavailable.
func (d *Driver) MapGranularity() int64 {
	if d.vmAvailable("") != nil {
		return 0
	}
	return VMGranularity
}

// ReserveAddress reserves size bytes (a multiple of VMGranularity, at most
// 1 TiB, the range of one cpu device address) with no memory behind them:
// it counts as one live allocation and no bytes. Like Malloc it is refused
// while a Global-mode capture is under way on the device.
func (d *Driver) ReserveAddress(size int64) (driver.DevicePtr, error) {
	return d.reserveAddress(size, driver.Global)
}

func (d *Driver) reserveAddress(size int64, interaction driver.CaptureMode) (p driver.DevicePtr, err error) {
	const what = "reserve address"
	err = d.vmCall(what, interaction, func() error {
		p, err = d.reserveRange(size, what)
		return err
	})
	return p, err
}

func (d *Driver) reserveRange(size int64, what string) (driver.DevicePtr, error) {
	switch {
	case size <= 0 || size%VMGranularity != 0:
		return 0, errf(driver.ErrInvalidValue, "%s: size %d is not a positive multiple of the granularity %d", what, size, VMGranularity)
	case size > maxAllocationSize:
		return 0, errf(driver.ErrOutOfMemory, "%s: %d B is more than a cpu device address spans (%d B)", what, size, int64(maxAllocationSize))
	}
	buf, err := vmReserve(size)
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.takeIDLocked()
	if !ok {
		_ = vmRelease(buf)
		return 0, errf(driver.ErrOutOfMemory, "%s %d B: all %d allocation ids in use", what, size, maxIDs-1)
	}
	r := &allocation{id: id, buf: buf, size: size, vm: &reservation{}}
	d.liveCount++
	d.table.Load().slots[id].rec.Store(r)
	return r.base(), nil
}

// ReleaseAddress gives back a whole reservation with nothing mapped in it.
func (d *Driver) ReleaseAddress(base driver.DevicePtr, size int64) error {
	return d.releaseAddress(base, size, driver.Global)
}

func (d *Driver) releaseAddress(base driver.DevicePtr, size int64, interaction driver.CaptureMode) error {
	const what = "release address"
	return d.vmCall(what, interaction, func() error { return d.releaseRange(base, size, what) })
}

func (d *Driver) releaseRange(base driver.DevicePtr, size int64, what string) error {
	d.mu.Lock()
	r := d.baseLocked(base)
	d.mu.Unlock()
	switch {
	case r == nil || r.vm == nil:
		return errf(driver.ErrInvalidValue, "%s %#x: not the base of a reservation", what, uint64(base))
	case size != r.size:
		return errf(driver.ErrInvalidValue, "%s %#x: size %d, the reservation has %d B", what, uint64(base), size, r.size)
	}
	d.vmMu.Lock()
	defer d.vmMu.Unlock()
	if n := len(r.vm.maps); n > 0 {
		return errf(driver.ErrInvalidValue, "%s %#x: %d B still mapped in %d range(s): unmap them first",
			what, uint64(base), r.vm.mapped, n)
	}
	d.mu.Lock()
	d.releaseLocked(r)
	d.mu.Unlock()
	// Work that resolved the range earlier now finds it dead, under vmMu.
	return vmRelease(r.buf)
}

// MapMemory backs [p, p+size) of a reservation with new zeroed memory,
// counted against Options.MemoryLimit like Malloc's.
func (d *Driver) MapMemory(p driver.DevicePtr, size int64) error {
	return d.mapMemory(p, size, driver.Global)
}

func (d *Driver) mapMemory(p driver.DevicePtr, size int64, interaction driver.CaptureMode) error {
	return d.rangeCall("map memory", interaction, p, size, d.mapRange)
}

func (d *Driver) mapRange(r *allocation, off int64, p driver.DevicePtr, size int64, what string) error {
	// vmCtl held: only its holders change maps.
	i := r.vm.first(off)
	if i < len(r.vm.maps) && r.vm.maps[i].off < off+size {
		m := r.vm.maps[i]
		return errf(driver.ErrInvalidValue, "%s %#x+%d: overlaps the mapped range %#x+%d",
			what, uint64(p), size, uint64(r.base())+uint64(m.off), m.size)
	}

	d.mu.Lock()
	if size > d.limit-d.live {
		live, n := d.live, d.liveCount
		d.mu.Unlock()
		return errf(driver.ErrOutOfMemory, "%s %d B: %d of %d B in use by %d allocations", what, size, live, d.limit, n)
	}
	d.live += size
	d.mu.Unlock()

	// Nothing reads or writes an unmapped range, so the mapping needs no
	// lock against the data path; publishing it does.
	if err := vmMap(r.buf[off : off+size]); err != nil {
		d.mu.Lock()
		d.live -= size
		d.mu.Unlock()
		return err
	}
	d.vmMu.Lock()
	r.vm.maps = slices.Insert(r.vm.maps, i, vmRange{off, size})
	r.vm.mapped += size
	d.vmMu.Unlock()
	return nil
}

// UnmapMemory unmaps exactly one MapMemory range and frees its memory.
// Like Free it first lets every stream finish its queued work, which may
// still use the range; work queued later that names it fails with
// ErrInvalidValue.
func (d *Driver) UnmapMemory(p driver.DevicePtr, size int64) error {
	return d.unmapMemory(p, size, driver.Global)
}

func (d *Driver) unmapMemory(p driver.DevicePtr, size int64, interaction driver.CaptureMode) error {
	return d.rangeCall("unmap memory", interaction, p, size, d.unmapRange)
}

func (d *Driver) unmapRange(r *allocation, off int64, p driver.DevicePtr, size int64, what string) error {
	i, found := slices.BinarySearchFunc(r.vm.maps, off, func(m vmRange, off int64) int { return cmp.Compare(m.off, off) })
	if !found || r.vm.maps[i].size != size {
		return errf(driver.ErrInvalidValue, "%s %#x+%d: not a range MapMemory mapped (only whole mappings unmap)",
			what, uint64(p), size)
	}
	d.drainAll()
	d.vmMu.Lock()
	defer d.vmMu.Unlock()
	if err := vmUnmap(r.buf[off : off+size]); err != nil {
		return err
	}
	r.vm.maps = slices.Delete(r.vm.maps, i, i+1)
	r.vm.mapped -= size
	d.mu.Lock()
	d.live -= size
	d.mu.Unlock()
	return nil
}

// rangeCall is MapMemory's and UnmapMemory's call (vmCall): [p, p+size)
// resolved in its reservation (vmRangeOf), then fn on it.
func (d *Driver) rangeCall(what string, interaction driver.CaptureMode, p driver.DevicePtr, size int64,
	fn func(r *allocation, off int64, p driver.DevicePtr, size int64, what string) error) error {
	return d.vmCall(what, interaction, func() error {
		r, off, err := d.vmRangeOf(p, size, what)
		if err != nil {
			return err
		}
		return fn(r, off, p, size, what)
	})
}

// vmCall runs fn, one virtual memory call, holding vmCtl. The call is
// synchronous and device wide like Malloc: refused while a Global-mode
// capture is under way (for a caller in Global interaction mode), and on a
// closed driver or where there is no virtual memory.
func (d *Driver) vmCall(what string, interaction driver.CaptureMode, fn func() error) error {
	if err := d.vmAvailable(what); err != nil {
		return err
	}
	d.vmCtl.Lock()
	defer d.vmCtl.Unlock()
	d.mu.Lock()
	err := errClosed(what)
	if !d.closed.Load() {
		err = d.refuseUnsafeLocked(what, interaction)
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	return fn()
}

// vmRangeOf checks that [p, p+size) is a granularity-aligned range inside
// one live reservation. vmCtl held, so the reservation cannot go away.
func (d *Driver) vmRangeOf(p driver.DevicePtr, size int64, what string) (*allocation, int64, error) {
	off := int64(uint64(p) & offsetMask)
	if size <= 0 || size%VMGranularity != 0 || off%VMGranularity != 0 {
		return nil, 0, errf(driver.ErrInvalidValue, "%s %#x+%d: offset and size must be multiples of the granularity %d",
			what, uint64(p), size, VMGranularity)
	}
	d.mu.Lock()
	r := d.baseLocked(p - driver.DevicePtr(off))
	d.mu.Unlock()
	switch {
	case r == nil || r.vm == nil:
		return nil, 0, errf(driver.ErrInvalidValue, "%s %#x: not inside a reservation", what, uint64(p))
	case off >= r.size || size > r.size-off:
		return nil, 0, errf(driver.ErrInvalidValue, "%s %#x+%d: crosses the end of the %d B reservation",
			what, uint64(p), size, r.size)
	}
	return r, off, nil
}

func errNoVM(what string) error {
	return errf(driver.ErrBackendUnavailable, "%s: virtual memory needs memfd_create (linux)", what)
}

// releaseReservations unmaps reservations Close found live (already marked
// dead, so work that resolved them fails first).
func (d *Driver) releaseReservations(live []*allocation) []error {
	var errs []error
	d.vmMu.Lock()
	defer d.vmMu.Unlock()
	for _, r := range live {
		if r.vm == nil {
			continue
		}
		if err := vmRelease(r.buf); err != nil {
			errs = append(errs, err)
		}
		r.vm.maps, r.vm.mapped = nil, 0
	}
	return errs
}
