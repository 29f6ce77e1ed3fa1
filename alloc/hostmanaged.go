package alloc

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Place is where Host.Prefetch moves managed memory.
type Place int

const (
	OnDevice Place = iota // the allocator's device
	OnHost                // the host (cudaCpuDeviceId, hipCpuDeviceId)
)

// AllocManaged returns n bytes of managed memory (cudaMallocManaged,
// hipMallocManaged, attached globally): Bytes is the host's view of it
// and DevicePtr its device address, for kernels; the runtime migrates
// the bytes to whichever side touches them, or ahead of time with
// Prefetch. Captured copies take it as they take pinned memory. Close
// frees it (an unsafe call, refused during captures that forbid one).
//
// The allocation is refused during any capture in the allocator's
// capture domain, in every mode and under every capture safety, before
// the driver: a managed allocation during a capture hangs GB10's driver.
// A driver without managed memory (driver.ManagedMemory), such as a
// plugin, fails with an error wrapping errors.ErrUnsupported.
func (x *Host) AllocManaged(n int64) (*HostBuffer, error) {
	a := x.a
	if n <= 0 {
		return nil, a.fail("AllocManaged", n, StateNone, wrapf(ErrInvalidSize, "size must be positive"))
	}
	mm, ok := a.drv.(driver.ManagedMemory)
	if !ok {
		return nil, a.fail("AllocManaged", n, StateNone, fmt.Errorf("%w: backend %s has no managed memory (no driver.ManagedMemory)", errors.ErrUnsupported, a.backend))
	}
	var h *HostBuffer
	err := a.guard.blockingUndo("AllocManaged", n, nil, func(st CaptureState) error {
		return refuseAnyCapture(&a.guard, st, "managed allocation")
	}, func() (func(), error) {
		p, b, err := mm.MallocManaged(n)
		if err != nil {
			return nil, err
		}
		if int64(len(b)) != n || p == 0 {
			err := fmt.Errorf("%w: managed allocation of %d B returned %d B at %#x", driver.ErrDriver, n, len(b), uint64(p))
			if p != 0 {
				err = errors.Join(err, mm.FreeManaged(p))
			}
			return nil, err
		}
		h = &HostBuffer{a: a, drv: a.drv, b: b[:n:n], mm: mm, dev: p}
		return adoptHost("AllocManaged", h), nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Prefetch queues on the allocator's stream a migration of h, managed
// memory from AllocManaged, to the device or the host
// (cudaMemPrefetchAsync, hipMemPrefetchAsync): work queued after it finds
// the bytes there, unchanged. It is refused, before the driver, during
// any capture in the allocator's capture domain: no recorded device's
// table (cmd/cudatruth, docs/cuda-truth.md) says a capture may record a
// prefetch, and an unmeasured call gets the strict rule. Prefetch before
// capturing, or after.
func (x *Host) Prefetch(h *HostBuffer, to Place) error {
	a := x.a
	if h == nil || h.a != a || h.mm == nil {
		return a.fail("Prefetch", -1, StateNone, wrapf(ErrInvalidBuffer, "not managed memory of this allocator (Host.AllocManaged)"))
	}
	if to != OnDevice && to != OnHost {
		return a.fail("Prefetch", h.Size(), StateNone, wrapf(ErrInvalidValue, "prefetch to Place(%d): want OnDevice or OnHost", int(to)))
	}
	return a.guard.enqueue("Prefetch", h.Size(), Buffer{}, Buffer{}, func() error {
		if h.closed.Load() {
			return wrapf(ErrClosed, "managed memory is closed")
		}
		return refuseAnyCapture(&a.guard, StateNone, "managed memory prefetch")
	}, func() error {
		return h.mm.PrefetchManaged(h.dev, h.Size(), to == OnHost, a.guard.stream)
	})
}

// MapHost gives the device an address for b, memory the engine already
// has (a Go slice, an mmap'ed file region). On a device that reads
// pageable host memory in place, through the host's page tables
// (DeviceInfo.HostPageTables, ATS: GB10, Grace Hopper), that address is
// b's own: no driver call, no pinning, no copy, so MapHost is allowed
// during captures, and Close makes no driver call either. Everywhere else
// it is Register: b is pinned and mapped, with Register's rules. That
// includes a device whose pageable access goes through the driver's
// mirror of the page tables (HMM: PageableMemoryAccess without
// HostPageTables), where a kernel's reads may migrate b's pages into
// device memory the allocator neither counts nor limits; pinned, they
// stay where they are.
//
// Either way b must stay alive and unmoved until Close, and DevicePtr is
// for kernels. A buffer mapped in place is not pinned: captured copies
// refuse it (they need pinned memory), kernels read it in place.
func (x *Host) MapHost(b []byte) (*HostBuffer, error) {
	a := x.a
	if !a.info.ReadsHostInPlace() {
		return x.Register(b)
	}
	n := int64(len(b))
	if n == 0 {
		return nil, a.fail("MapHost", n, StateNone, wrapf(ErrInvalidSize, "empty memory"))
	}
	h := &HostBuffer{a: a, drv: a.drv, b: b[:n:n], mapped: true, dev: driver.DevicePtr(uintptr(unsafe.Pointer(unsafe.SliceData(b))))}
	adoptHost("MapHost", h)
	return h, nil
}

// refuseAnyCapture refuses what while any capture is active: on the
// allocator's stream (its own, in any mode, or another's), or anywhere in
// its capture domain, whatever the device's capture safety. Caller holds
// the allocator's lock.
func refuseAnyCapture(g *guard, st CaptureState, what string) error {
	if st == StateInvalidated {
		return wrapf(ErrCaptureInvalidated, "%s", what)
	}
	n := g.dom.active()
	if st != StateNone || n > 0 {
		return unsafeRefused("%s: refused during any capture (%d active in the capture domain, stream %s); no driver call was made", what, n, st)
	}
	return nil
}
