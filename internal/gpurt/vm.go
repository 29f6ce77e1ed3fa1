package gpurt

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Virtual memory (driver.VirtualMemory)
//
// Both runtimes have the same eight calls, of one shape (cuda.h's cuMem*,
// from the driver API; hip_runtime_api.h's hipMem*, from the runtime):
//
//	granularity(size_t *out, const Prop *prop, int option)
//	reserve(ptr *out, size_t size, size_t alignment, ptr addr, unsigned long long flags)
//	free(ptr, size_t size)
//	create(handle *out, size_t size, const Prop *prop, unsigned long long flags)
//	release(handle)
//	map(ptr, size_t size, size_t offset, handle, unsigned long long flags)
//	unmap(ptr, size_t size)
//	set access(ptr, size_t size, const AccessDesc *desc, size_t count)
//
// What differs stays in the vendor package: where the calls come from,
// the properties struct's layout (HIP's changed in 5.3), and the thread
// state the calls need (CUDA: the runtime's primary context current).
//
// MapMemory is create, map, set access (read-write for the driver's
// device); the handle is kept with the mapping and released after its
// unmap, as PyTorch's expandable segments do. Every call runs on the dev
// thread. Like Malloc they are device-wide and unsafe, and like Malloc they
// are not guarded here: alloc makes them under its own guard (taking
// driver.DeviceWide here would take the guard's shared side twice). The
// bookkeeping (reservations and their mappings) is the dev thread's too,
// and every bad range is refused from it before any call.

// VMAPI is what a vendor gives for virtual memory, built on the dev thread
// at the first call that needs it (Config.VirtualMemory).
type VMAPI struct {
	// The calls above, each returning the vendor's error code; one not
	// resolved (Addr 0) means no virtual memory, with Lib, the library
	// they come from, named as lacking it.
	Granularity, Reserve, Free, Create, Release, Map, Unmap, SetAccess Sym
	Lib                                                                string
	// GranularityOption is the granularity call's option: the recommended
	// granularity.
	GranularityOption uintptr
	// Prop is the allocation properties: pinned memory on the driver's
	// device, no export handle types, in the vendor's layout. Access is
	// one access descriptor: read-write for the driver's device.
	Prop, Access []byte
	// SetCurrent(Current), when SetCurrent.Addr is set, is made before the
	// calls (CUDA: the primary context, which the driver API acts on).
	SetCurrent Sym
	Current    uintptr
	// Check is the typed error of a code from these calls (nil for 0).
	Check func(op, call string, code int32) error
	// Close, when set, runs at the driver's Close on the dev thread, after
	// the reservations left are released (CUDA: releases the retained
	// primary context).
	Close func() error
}

// AllocationProp is the allocation properties struct in the layout both
// runtimes share (cuda.h's CUmemAllocationProp; hipMemAllocationProp from
// HIP 5.3; each vendor's vm.go cites its header): type at 0, requested
// handle types at 4 (0: none), location type at 8 and id at 12, the
// Windows metadata pointer at 16 and the allocation flags at 24 zero;
// 32 B.
func AllocationProp(allocType, locationType int32, dev int) []byte {
	b := make([]byte, 32)
	binary.NativeEndian.PutUint32(b[0:], uint32(allocType))
	binary.NativeEndian.PutUint32(b[8:], uint32(locationType))
	binary.NativeEndian.PutUint32(b[12:], uint32(dev))
	return b
}

// AccessDesc is the access descriptor both runtimes share
// (CUmemAccessDesc, hipMemAccessDesc): location type at 0, id at 4, the
// access flags at 8; 12 B.
func AccessDesc(locationType int32, dev int, flags int32) []byte {
	b := make([]byte, 12)
	binary.NativeEndian.PutUint32(b[0:], uint32(locationType))
	binary.NativeEndian.PutUint32(b[4:], uint32(dev))
	binary.NativeEndian.PutUint32(b[8:], uint32(flags))
	return b
}

// vmState is the driver's virtual memory: its API and reservations (dev
// thread only), and the granularity (0: not offered, with bindErr saying
// why) published for MapGranularity.
type vmState struct {
	bound   bool
	api     *VMAPI
	bindErr error
	gran    atomic.Int64 // -1 until bound; read lock-free
	res     map[uintptr]*vmReservation
}

// vmReservation is one ReserveAddress range and its mappings, sorted by
// offset, never overlapping.
type vmReservation struct {
	base, size uintptr
	maps       []vmMapping
}

type vmMapping struct {
	off, size uintptr
	handle    uintptr // the create call's, released after the unmap
}

// vmBind binds the vendor's calls and reads the granularity once, on the
// dev thread. A failure is kept: the driver then does not offer virtual
// memory (MapGranularity 0, ErrBackendUnavailable), for its life.
func (d *Driver) vmBind() {
	vm := &d.vm
	if vm.bound {
		return
	}
	vm.bound = true
	vm.gran.Store(0)
	if d.vmHook == nil {
		vm.bindErr = d.v.Errf(driver.ErrBackendUnavailable, "virtual memory: this driver has none")
		return
	}
	api, err := d.vmHook(&Setup{RT: d.rt, Opts: d.opts, d: d})
	if err != nil {
		vm.bindErr = err
		return
	}
	var g int64
	if missing := api.missing(); len(missing) > 0 {
		err = d.v.Errf(driver.ErrBackendUnavailable, "virtual memory: %s lacks %v", api.Lib, missing)
	} else {
		g, err = d.vmGranularity(api)
	}
	if err != nil {
		vm.bindErr = err
		if api.Close != nil {
			_ = api.Close()
		}
		return
	}
	vm.api, vm.res = api, map[uintptr]*vmReservation{}
	vm.gran.Store(g)
}

func (a *VMAPI) missing() []string {
	var names []string
	for _, s := range []Sym{a.Granularity, a.Reserve, a.Free, a.Create, a.Release, a.Map, a.Unmap, a.SetAccess} {
		if s.Addr == 0 {
			names = append(names, s.Name)
		}
	}
	return names
}

// vmGranularity asks for the recommended granularity: the device's answer
// to whether it supports virtual memory at all.
func (d *Driver) vmGranularity(api *VMAPI) (int64, error) {
	if err := api.current("virtual memory: granularity"); err != nil {
		return 0, err
	}
	var g uint64
	code := Call(api.Granularity.Addr, uintptr(unsafe.Pointer(&g)), uintptr(unsafe.Pointer(&api.Prop[0])), api.GranularityOption)
	if err := api.Check(fmt.Sprintf("virtual memory: granularity of device %d", d.opts.Device), api.Granularity.Name, code); err != nil {
		return 0, fmt.Errorf("%w (%w)", d.v.Errf(driver.ErrBackendUnavailable, "virtual memory unsupported"), err)
	}
	if g == 0 || g&(g-1) != 0 || g > 1<<40 {
		return 0, d.v.Errf(driver.ErrBackendUnavailable, "virtual memory: %s reported a granularity of %d B", api.Granularity.Name, g)
	}
	return int64(g), nil
}

// current makes the vendor's thread state current (dev thread).
func (a *VMAPI) current(op string) error {
	if a.SetCurrent.Addr == 0 {
		return nil
	}
	return a.Check(op, a.SetCurrent.Name, Call(a.SetCurrent.Addr, a.Current))
}

// MapGranularity is driver.VirtualMemory's: the recommended granularity
// for the driver's device, or 0 when it offers no virtual memory (the
// library lacks the calls, or the device refuses the query; every other
// method then says why, wrapping driver.ErrBackendUnavailable). The first
// call binds the calls on the dev thread.
func (d *Driver) MapGranularity() int64 {
	if g := d.vm.gran.Load(); g >= 0 {
		return g
	}
	if d.closed.Load() {
		return 0
	}
	if d.dev.Do("virtual memory", func() error { d.vmBind(); return nil }) != nil {
		return 0 // the dev thread stopped: closed meanwhile
	}
	return d.vm.gran.Load()
}

// vmDo runs fn on the dev thread with the calls bound and the vendor's
// state current, or says why it cannot (closed, not offered).
func (d *Driver) vmDo(op string, fn func(api *VMAPI, gran uintptr) error) error {
	if d.closed.Load() {
		return d.v.ErrClosed(op)
	}
	return d.dev.Do(op, func() error {
		if d.closed.Load() { // Close's teardown has run or is queued behind us
			return d.v.ErrClosed(op)
		}
		d.vmBind()
		api := d.vm.api
		if api == nil {
			return fmt.Errorf("%s: %w", op, d.vm.bindErr)
		}
		if err := api.current(op); err != nil {
			return err
		}
		return fn(api, uintptr(d.vm.gran.Load()))
	})
}

// ReserveAddress is driver.VirtualMemory's: size bytes of device address
// space, a multiple of MapGranularity.
func (d *Driver) ReserveAddress(size int64) (driver.DevicePtr, error) {
	op := fmt.Sprintf("reserve %d B of address space", size)
	var base uintptr
	err := d.vmDo(op, func(api *VMAPI, gran uintptr) error {
		if size <= 0 || uintptr(size)%gran != 0 {
			return d.v.Errf(driver.ErrInvalidValue, "%s: not a positive multiple of the granularity %d", op, gran)
		}
		if err := api.Check(op, api.Reserve.Name,
			Call(api.Reserve.Addr, uintptr(unsafe.Pointer(&base)), uintptr(size), 0, 0, 0)); err != nil {
			return err
		}
		d.vm.res[base] = &vmReservation{base: base, size: uintptr(size)}
		return nil
	})
	return driver.DevicePtr(base), err
}

// ReleaseAddress is driver.VirtualMemory's: a whole reservation, nothing
// mapped in it.
func (d *Driver) ReleaseAddress(base driver.DevicePtr, size int64) error {
	op := fmt.Sprintf("release address %#x+%d", uint64(base), size)
	return d.vmDo(op, func(api *VMAPI, _ uintptr) error {
		r := d.vm.res[uintptr(base)]
		switch {
		case r == nil:
			return d.v.Errf(driver.ErrInvalidValue, "%s: not the base of a reservation", op)
		case uintptr(size) != r.size || size <= 0:
			return d.v.Errf(driver.ErrInvalidValue, "%s: the reservation has %d B", op, r.size)
		case len(r.maps) > 0:
			return d.v.Errf(driver.ErrInvalidValue, "%s: %d range(s) still mapped: unmap them first", op, len(r.maps))
		}
		if err := api.Check(op, api.Free.Name, Call(api.Free.Addr, r.base, r.size)); err != nil {
			return err
		}
		delete(d.vm.res, r.base)
		return nil
	})
}

// vmRange finds the reservation [p, p+size) lies in, checking that offset
// and size are granularity multiples. Dev thread.
func (d *Driver) vmRange(op string, p driver.DevicePtr, size int64, gran uintptr) (*vmReservation, uintptr, error) {
	if size <= 0 || uintptr(size)%gran != 0 {
		return nil, 0, d.v.Errf(driver.ErrInvalidValue, "%s: size not a positive multiple of the granularity %d", op, gran)
	}
	for _, r := range d.vm.res {
		if uintptr(p) >= r.base && uintptr(p)-r.base < r.size {
			off := uintptr(p) - r.base
			switch {
			case off%gran != 0:
				return nil, 0, d.v.Errf(driver.ErrInvalidValue, "%s: offset %d in its reservation is not a multiple of the granularity %d", op, off, gran)
			case uintptr(size) > r.size-off:
				return nil, 0, d.v.Errf(driver.ErrInvalidValue, "%s: crosses the end of the %d B reservation", op, r.size)
			}
			return r, off, nil
		}
	}
	return nil, 0, d.v.Errf(driver.ErrInvalidValue, "%s: not inside a reservation", op)
}

// inRange runs fn, a map or unmap of [p, p+size), on the dev thread
// (vmDo) with the reservation the range lies in and its offset there
// (vmRange).
func (d *Driver) inRange(op string, p driver.DevicePtr, size int64, fn func(api *VMAPI, r *vmReservation, off uintptr) error) error {
	return d.vmDo(op, func(api *VMAPI, gran uintptr) error {
		r, off, err := d.vmRange(op, p, size, gran)
		if err != nil {
			return err
		}
		return fn(api, r, off)
	})
}

// MapMemory is driver.VirtualMemory's: new memory of the driver's device,
// mapped read-write over [p, p+size) of a reservation, where nothing is
// mapped. A failure part way undoes what was done.
func (d *Driver) MapMemory(p driver.DevicePtr, size int64) error {
	op := fmt.Sprintf("map %d B at %#x", size, uint64(p))
	return d.inRange(op, p, size, func(api *VMAPI, r *vmReservation, off uintptr) error {
		n := uintptr(size)
		i, _ := slices.BinarySearchFunc(r.maps, off, func(m vmMapping, off uintptr) int { return cmp.Compare(m.off+m.size, off+1) })
		if i < len(r.maps) && r.maps[i].off < off+n {
			return d.v.Errf(driver.ErrInvalidValue, "%s: overlaps the mapping at %#x+%d", op, r.base+r.maps[i].off, r.maps[i].size)
		}
		var h uintptr
		if err := api.Check(op, api.Create.Name,
			Call(api.Create.Addr, uintptr(unsafe.Pointer(&h)), n, uintptr(unsafe.Pointer(&api.Prop[0])), 0)); err != nil {
			return err
		}
		if err := api.Check(op, api.Map.Name, Call(api.Map.Addr, uintptr(p), n, 0, h, 0)); err != nil {
			Call(api.Release.Addr, h)
			return err
		}
		if err := api.Check(op, api.SetAccess.Name,
			Call(api.SetAccess.Addr, uintptr(p), n, uintptr(unsafe.Pointer(&api.Access[0])), 1)); err != nil {
			Call(api.Unmap.Addr, uintptr(p), n)
			Call(api.Release.Addr, h)
			return err
		}
		r.maps = slices.Insert(r.maps, i, vmMapping{off: off, size: n, handle: h})
		return nil
	})
}

// UnmapMemory is driver.VirtualMemory's: one MapMemory range, whose memory
// is released. It does not wait for work still using the range: the
// caller unmaps only memory no queued work uses.
func (d *Driver) UnmapMemory(p driver.DevicePtr, size int64) error {
	op := fmt.Sprintf("unmap %d B at %#x", size, uint64(p))
	return d.inRange(op, p, size, func(api *VMAPI, r *vmReservation, off uintptr) error {
		i, found := slices.BinarySearchFunc(r.maps, off, func(m vmMapping, off uintptr) int { return cmp.Compare(m.off, off) })
		if !found || r.maps[i].size != uintptr(size) {
			return d.v.Errf(driver.ErrInvalidValue, "%s: not a range MapMemory mapped (only whole mappings unmap)", op)
		}
		m := r.maps[i]
		if err := api.Check(op, api.Unmap.Name, Call(api.Unmap.Addr, uintptr(p), m.size)); err != nil {
			return err
		}
		// Unmapped: the mapping is gone whatever the release says.
		r.maps = slices.Delete(r.maps, i, i+1)
		return api.Check(op, api.Release.Name, Call(api.Release.Addr, m.handle))
	})
}

// releaseVM runs in Close's teardown, on the dev thread: whatever the
// allocator left mapped and reserved is unmapped, released and freed.
func (d *Driver) releaseVM() error {
	api := d.vm.api
	if api == nil {
		return nil
	}
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	keep(api.current("close: virtual memory"))
	for _, r := range d.vm.res {
		for _, m := range r.maps {
			keep(api.Check("close: unmap", api.Unmap.Name, Call(api.Unmap.Addr, r.base+m.off, m.size)))
			keep(api.Check("close: release mapped memory", api.Release.Name, Call(api.Release.Addr, m.handle)))
		}
		keep(api.Check("close: release address range", api.Free.Name, Call(api.Free.Addr, r.base, r.size)))
	}
	d.vm.res = nil
	if api.Close != nil {
		keep(api.Close())
	}
	return first
}
