package cpu

import "github.com/capalloc/capalloc/alloc/driver"

// Address lookups: from a device address to its allocation record, in the
// id table newAllocation publishes into (memory.go).

// resolve turns (p, n) into a live allocation and offset. The reason is empty
// on success; callers build the error so the hot path does not format.
func (d *Driver) resolve(p driver.DevicePtr, n int64) (*allocation, int64, string) {
	if n < 0 {
		return nil, 0, "negative size"
	}
	id := uint64(p) >> offsetBits
	off := int64(uint64(p) & offsetMask)
	t := d.table.Load()
	if id == 0 || id >= uint64(len(t.slots)) {
		return nil, 0, "no allocation"
	}
	r := t.slots[id].rec.Load()
	if r == nil || r.dead.Load() {
		return nil, 0, "no allocation"
	}
	if off > r.size || n > r.size-off {
		return nil, 0, "range crosses the end of the allocation"
	}
	if r.vm != nil && !d.vmCovers(r, off, n) {
		return nil, 0, "range is not mapped in its reservation"
	}
	return r, off, ""
}

func (d *Driver) vmCovers(r *allocation, off, n int64) bool {
	d.vmMu.RLock()
	defer d.vmMu.RUnlock()
	return r.vm.covers(off, n)
}

// lockVM read-locks the mapped state when a or b is a reservation, so
// their chunks stay mapped while an operation touches them; the returned
// function unlocks.
func (d *Driver) lockVM(a, b *allocation) (unlock func()) {
	if !inReservation(a, b) {
		return noUnlock
	}
	d.vmMu.RLock()
	return d.vmMu.RUnlock
}

func noUnlock() {}

// inReservation reports whether a or b is a reservation (lockVM).
func inReservation(a, b *allocation) bool {
	return (a != nil && a.vm != nil) || (b != nil && b.vm != nil)
}

// baseLocked finds the allocation p is the base address of. d.mu held.
func (d *Driver) baseLocked(p driver.DevicePtr) *allocation {
	if uint64(p)&offsetMask != 0 {
		return nil
	}
	id := uint64(p) >> offsetBits
	t := d.table.Load()
	if id == 0 || id >= uint64(len(t.slots)) {
		return nil
	}
	r := t.slots[id].rec.Load()
	if r == nil || r.dead.Load() {
		return nil
	}
	return r
}
