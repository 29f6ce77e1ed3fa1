package nccl

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// Symmetric windows (NCCL 2.27): a buffer every rank registers at the same
// size, so NCCL's symmetric kernels reach peers' copies directly. The
// memory must come from ncclMemAlloc (CUDA's VMM allocations), not from a
// stream-ordered pool, so a Window owns memory outside the allocator.
// Signatures (nccl.h):
//
//	ncclResult_t ncclMemAlloc(void **ptr, size_t size)             // 2.19
//	ncclResult_t ncclMemFree(void *ptr)
//	ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
//	    ncclWindow_t *win, int winFlags)                            // 2.27
//	ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
//	#define NCCL_WIN_COLL_SYMMETRIC 0x01

const winCollSymmetric = 0x01 // NCCL_WIN_COLL_SYMMETRIC

// bindOptional resolves the symbols older NCCLs lack; a missing one stays 0.
func bindOptional(l *Library, h uintptr) {
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"ncclMemAlloc", &l.memAlloc},
		{"ncclMemFree", &l.memFree},
		{"ncclCommWindowRegister", &l.winRegister},
		{"ncclCommWindowDeregister", &l.winDeregister},
		{"ncclCommSplit", &l.commSplit}, // 2.18
	} {
		if p, err := purego.Dlsym(h, s.name); err == nil {
			*s.p = p
		}
	}
}

// HasWindows reports whether this NCCL registers symmetric windows (2.27
// and later: ncclMemAlloc and ncclCommWindowRegister are present).
func (l *Library) HasWindows() bool {
	return l.memAlloc != 0 && l.memFree != 0 && l.winRegister != 0 && l.winDeregister != 0
}

// Window is one rank's buffer of a symmetric window: size bytes from
// ncclMemAlloc, registered with the communicator.
type Window struct {
	c    *Comm
	ptr  uintptr
	size int64
	h    uintptr // ncclWindow_t
}

// NewWindow allocates size bytes with ncclMemAlloc on dev's device and
// registers them as a symmetric window of c (NCCL_WIN_COLL_SYMMETRIC).
// Registration is collective: every rank calls it, in the same order, with
// the same size, and it returns once they have. Like InitRank it is made
// under alloc's device-wide guard, so it is refused with no NCCL call
// during a Global-mode capture: register windows before capturing, as
// symheap opens heaps. An NCCL without windows is refused with
// driver.ErrBackendUnavailable naming its version.
func (c *Comm) NewWindow(dev DeviceRunner, size int64) (*Window, error) {
	l := c.l
	switch {
	case !l.HasWindows():
		return nil, fmt.Errorf("%w: nccl: symmetric windows need NCCL 2.27 (ncclMemAlloc, ncclCommWindowRegister); %s is %s", driver.ErrBackendUnavailable, l.Path, VersionString(l.Version))
	case dev == nil:
		return nil, fmt.Errorf("%w: nccl: window: no device", alloc.ErrInvalidValue)
	case size <= 0:
		return nil, fmt.Errorf("%w: nccl: window of %d B", alloc.ErrInvalidSize, size)
	}
	ch, err := c.handle("window")
	if err != nil {
		return nil, err
	}
	w := &Window{c: c, size: size}
	err = driver.DeviceWide(l.domain, "nccl: register window", func() error {
		return dev.OnDevice("nccl: register window", func() error {
			var p uintptr
			if err := l.check("ncclMemAlloc", gpurt.Call(l.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size))); err != nil {
				return err
			}
			var h uintptr
			if err := l.check("ncclCommWindowRegister", gpurt.Call(l.winRegister, ch, p, uintptr(size), uintptr(unsafe.Pointer(&h)), winCollSymmetric)); err != nil {
				_ = gpurt.Call(l.memFree, p)
				return err
			}
			w.ptr, w.h = p, h
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("nccl: window of %d B on rank %d: %w", size, c.rank, err)
	}
	return w, nil
}

// Ptr is this rank's device address of the window; Size its length.
func (w *Window) Ptr() driver.DevicePtr { return driver.DevicePtr(w.ptr) }
func (w *Window) Size() int64           { return w.size }

// Close deregisters the window (collective, like NewWindow) and frees its
// memory, under the device-wide guard. Graphs that use the window must be
// closed first. A second Close fails with alloc.ErrClosed.
func (w *Window) Close(dev DeviceRunner) error {
	if w.h == 0 {
		return fmt.Errorf("%w: nccl: window closed twice", alloc.ErrClosed)
	}
	if dev == nil {
		return fmt.Errorf("%w: nccl: window: no device", alloc.ErrInvalidValue)
	}
	l := w.c.l
	ch, err := w.c.handle("deregister window")
	if err != nil {
		return err
	}
	err = driver.DeviceWide(l.domain, "nccl: deregister window", func() error {
		return dev.OnDevice("nccl: deregister window", func() error {
			if err := l.check("ncclCommWindowDeregister", gpurt.Call(l.winDeregister, ch, w.h)); err != nil {
				return err
			}
			w.h = 0
			return l.check("ncclMemFree", gpurt.Call(l.memFree, w.ptr))
		})
	})
	return err
}

// AllReduceWindow sums count elements at sendOff of every rank's window
// into recvOff of each (ncclAllReduce on window memory, so NCCL may use its
// symmetric kernels), on a's stream through Allocator.Enqueue: captured
// with the step in a's capture, refused in any other. Offsets must be the
// same on every rank (NCCL_WIN_COLL_SYMMETRIC).
func (c *Comm) AllReduceWindow(a *alloc.Allocator, w *Window, sendOff, recvOff, count int64, dt DataType, op RedOp) error {
	sz, err := dt.size()
	if err != nil {
		return err
	}
	if w == nil || w.h == 0 || w.c != c {
		return fmt.Errorf("%w: nccl: all-reduce: not an open window of this communicator", alloc.ErrInvalidValue)
	}
	for _, off := range []int64{sendOff, recvOff} {
		if count <= 0 || off < 0 || off > w.size || count > (w.size-off)/sz {
			return fmt.Errorf("%w: nccl: all-reduce: %d elements of %d B at offset %d outside a %d B window", alloc.ErrOutOfRange, count, sz, off, w.size)
		}
	}
	return c.enqueue(a, "all-reduce (window)", "ncclAllReduce", nil, func(h, s uintptr) int32 {
		return gpurt.Call(c.l.allReduce, w.ptr+uintptr(sendOff), w.ptr+uintptr(recvOff), uintptr(count), uintptr(dt), uintptr(op), h, s)
	})
}
