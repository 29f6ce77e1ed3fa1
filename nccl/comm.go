package nccl

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// DataType is ncclDataType_t (nccl.h): the element types supported here.
type DataType int32

const (
	Int32   DataType = 2 // ncclInt32
	Float32 DataType = 7 // ncclFloat32
)

// RedOp is ncclRedOp_t.
type RedOp int32

const Sum RedOp = 0 // ncclSum

func (d DataType) size() (int64, error) {
	switch d {
	case Int32, Float32:
		return 4, nil
	}
	return 0, fmt.Errorf("%w: nccl: data type %d", alloc.ErrInvalidValue, d)
}

// Comm is one rank's communicator.
type Comm struct {
	l     *Library
	h     uintptr // ncclComm_t
	rank  int
	ranks int
}

// InitAll makes one communicator per device of devices, all in this
// process (ncclCommInitAll): rank i runs on devices[i]. It is a
// device-wide call: refused (driver.ErrCaptureIllegalOp) while a Global-mode
// capture is active in the process.
func (l *Library) InitAll(devices []int) ([]*Comm, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("%w: nccl: no device", alloc.ErrInvalidValue)
	}
	devs := make([]int32, len(devices))
	for i, d := range devices {
		devs[i] = int32(d)
	}
	hs := make([]uintptr, len(devices))
	err := driver.DeviceWide(l.domain, "nccl: init communicators", func() error {
		return l.check("ncclCommInitAll", gpurt.Call(l.commInitAll, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(devs)), uintptr(unsafe.Pointer(&devs[0]))))
	})
	if err != nil {
		return nil, err
	}
	comms := make([]*Comm, len(hs))
	for i, h := range hs {
		comms[i] = &Comm{l: l, h: h, rank: i, ranks: len(hs)}
	}
	return comms, nil
}

// Rank and Ranks are the communicator's rank and size.
func (c *Comm) Rank() int  { return c.rank }
func (c *Comm) Ranks() int { return c.ranks }

// Destroy frees the communicator (ncclCommDestroy), under the guard like
// InitAll.
func (c *Comm) Destroy() error {
	if c.h == 0 {
		return fmt.Errorf("%w: nccl: communicator destroyed twice", alloc.ErrClosed)
	}
	err := driver.DeviceWide(c.l.domain, "nccl: destroy communicator", func() error {
		return c.l.check("ncclCommDestroy", gpurt.Call(c.l.commDestroy, c.h))
	})
	if err == nil {
		c.h = 0
	}
	return err
}

// elems checks that b holds count elements of dt and returns its bytes.
func elems(what string, b alloc.Buffer, count int64, dt DataType) error {
	sz, err := dt.size()
	if err != nil {
		return err
	}
	if count <= 0 || count > b.Size()/sz {
		return fmt.Errorf("%w: nccl: %s: %d elements of %d B do not fit in a %d B buffer", alloc.ErrOutOfRange, what, count, sz, b.Size())
	}
	return nil
}

// AllReduce sums count elements of send over the ranks into recv
// (ncclAllReduce) on a's stream. send and recv may be the same buffer.
func (c *Comm) AllReduce(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType, op RedOp) error {
	if err := elems("all-reduce", send, count, dt); err != nil {
		return err
	}
	if err := elems("all-reduce", recv, count, dt); err != nil {
		return err
	}
	return a.Enqueue("nccl all-reduce", []alloc.Buffer{send, recv}, func(s driver.Stream) error {
		return c.l.check("ncclAllReduce", gpurt.Call(c.l.allReduce, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), uintptr(op), c.h, uintptr(s)))
	})
}

// AllGather writes every rank's count elements of send into recv, rank
// order (ncclAllGather): recv holds Ranks()*count elements.
func (c *Comm) AllGather(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType) error {
	if err := elems("all-gather", send, count, dt); err != nil {
		return err
	}
	if err := elems("all-gather", recv, int64(c.ranks)*count, dt); err != nil {
		return err
	}
	return a.Enqueue("nccl all-gather", []alloc.Buffer{send, recv}, func(s driver.Stream) error {
		return c.l.check("ncclAllGather", gpurt.Call(c.l.allGather, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), c.h, uintptr(s)))
	})
}

// ReduceScatter sums the ranks' send (Ranks()*count elements) and leaves
// this rank's count-element share in recv (ncclReduceScatter).
func (c *Comm) ReduceScatter(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType, op RedOp) error {
	if err := elems("reduce-scatter", send, int64(c.ranks)*count, dt); err != nil {
		return err
	}
	if err := elems("reduce-scatter", recv, count, dt); err != nil {
		return err
	}
	return a.Enqueue("nccl reduce-scatter", []alloc.Buffer{send, recv}, func(s driver.Stream) error {
		return c.l.check("ncclReduceScatter", gpurt.Call(c.l.reduceScatter, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), uintptr(op), c.h, uintptr(s)))
	})
}

// AllToAll sends count elements of send's p-th chunk to rank p and
// receives rank p's into recv's p-th chunk (grouped ncclSend/ncclRecv).
func (c *Comm) AllToAll(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType) error {
	sz, err := dt.size()
	if err != nil {
		return err
	}
	if err := elems("all-to-all", send, int64(c.ranks)*count, dt); err != nil {
		return err
	}
	if err := elems("all-to-all", recv, int64(c.ranks)*count, dt); err != nil {
		return err
	}
	return a.Enqueue("nccl all-to-all", []alloc.Buffer{send, recv}, func(s driver.Stream) error {
		if err := c.l.check("ncclGroupStart", gpurt.Call(c.l.groupStart)); err != nil {
			return err
		}
		var first error
		for p := range c.ranks {
			off := uintptr(int64(p) * count * sz)
			if first == nil {
				first = c.l.check("ncclSend", gpurt.Call(c.l.send, uintptr(send.Ptr())+off, uintptr(count), uintptr(dt), uintptr(p), c.h, uintptr(s)))
			}
			if first == nil {
				first = c.l.check("ncclRecv", gpurt.Call(c.l.recv, uintptr(recv.Ptr())+off, uintptr(count), uintptr(dt), uintptr(p), c.h, uintptr(s)))
			}
		}
		if err := c.l.check("ncclGroupEnd", gpurt.Call(c.l.groupEnd)); first == nil {
			first = err
		}
		return first
	})
}
