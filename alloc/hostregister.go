package alloc

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Host is the allocator's host memory beyond HostAlloc's pinned buffers:
// memory the engine already has, registered for the device
// (docs/host-memory.md). Its calls follow the allocator's capture rules.
type Host struct{ a *Allocator }

// Host returns the allocator's host memory calls.
func (a *Allocator) Host() *Host { return &Host{a} }

// Register pins memory the engine already has (a Go slice, an mmap'ed
// file region) with the driver's host registration (cudaHostRegister,
// hipHostRegister, mapped), so captured copies use it like any
// HostBuffer's and kernels reach it at HostBuffer.DevicePtr. Close
// unregisters it. Registering is an unsafe call: refused during captures
// that forbid one, as HostAlloc's pinning is.
//
// b must stay alive and unmoved until Close: keep a reference to it (the
// slice, or the mapping: do not munmap it) and do not grow it with append
// (that may move it). The bytes are the engine's: Bytes returns b itself.
// A driver without host registration (driver.HostRegisterer), such as a
// plugin, whose backend process cannot pin this process's memory, fails
// with an error wrapping errors.ErrUnsupported before any driver call.
func (x *Host) Register(b []byte) (*HostBuffer, error) {
	a := x.a
	size := int64(len(b))
	if size == 0 {
		return nil, a.fail("RegisterHost", size, StateNone, wrapf(ErrInvalidSize, "empty memory"))
	}
	reg, ok := a.drv.(driver.HostRegisterer)
	if !ok {
		return nil, a.fail("RegisterHost", size, StateNone, fmt.Errorf("%w: backend %s cannot register host memory (no driver.HostRegisterer)", errors.ErrUnsupported, a.backend))
	}
	var h *HostBuffer
	err := a.guard.blockingUndo("RegisterHost", size, nil, func(st CaptureState) error {
		return a.guard.deviceWideRefusalLocked(st, "host memory registration")
	}, func() (func(), error) {
		p, err := reg.HostRegister(b)
		if err != nil {
			return nil, err
		}
		h = &HostBuffer{a: a, drv: a.drv, b: b[:size:size], reg: reg, dev: p}
		return adoptHost("RegisterHost", h), nil
	})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// DevicePtr is the buffer's device address, for kernels that read or
// write host memory in place: registered memory's (Host.Register),
// managed memory's (Host.AllocManaged), mapped memory's (Host.MapHost).
// Zero for HostAlloc's buffers, which the allocator pins without mapping.
func (h *HostBuffer) DevicePtr() driver.DevicePtr {
	if h.closed.Load() {
		return 0
	}
	return h.dev
}

// adoptHost books h, memory the driver just gave, as a live host buffer,
// and returns what undoes that if the watchdog abandoned the call that
// made it (nobody holds h then): release h and give its memory back, late.
func adoptHost(op string, h *HostBuffer) (undo func()) {
	a := h.a
	a.mu.Lock()
	a.hosts[h] = struct{}{}
	a.stats.HostBuffers++
	a.stats.HostBytes += h.Size()
	a.mu.Unlock()
	return func() {
		if h.release() {
			a.releases.logLate(op, a.releases.cleanupLate(op, h.unpin))
		}
	}
}
