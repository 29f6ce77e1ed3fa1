package nccl

import (
	"fmt"
	"sync"
	"time"
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
	rank  int
	ranks int
	dev   DeviceRunner // InitRank's, for Split; nil from InitAll
	split string       // how Split made it, for errors; "" otherwise

	mu      sync.Mutex
	h       uintptr       // ncclComm_t; 0 once destroyed or aborted
	aborted error         // why it was aborted; nil while usable
	timeout time.Duration // SetTimeout's
}

func newComm(l *Library, h uintptr, rank, ranks int, dev DeviceRunner) *Comm {
	return &Comm{l: l, h: h, rank: rank, ranks: ranks, dev: dev, timeout: alloc.DefaultWatchdog}
}

// adopt gives c, made before its NCCL call returned, the handle the call
// wrote (0: none).
func (c *Comm) adopt(h uintptr) {
	c.mu.Lock()
	c.h = h
	c.mu.Unlock()
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
		comms[i] = newComm(l, h, i, len(hs), nil)
	}
	return comms, nil
}

// Rank and Ranks are the communicator's rank and size.
func (c *Comm) Rank() int  { return c.rank }
func (c *Comm) Ranks() int { return c.ranks }

// Destroy frees the communicator (ncclCommDestroy), under the guard like
// InitAll and within the communicator's timeout (SetTimeout): past it the
// communicator is aborted and the result is ErrCollectiveTimeout. An
// aborted communicator was freed by its abort: Destroy returns nil with no
// call. Destroying twice is alloc.ErrClosed.
func (c *Comm) Destroy() error {
	if c.abortCause() != nil {
		return nil
	}
	h, err := c.handle("destroy")
	if err != nil {
		return fmt.Errorf("%w: nccl: communicator destroyed twice", alloc.ErrClosed)
	}
	err = driver.DeviceWide(c.l.domain, "nccl: destroy communicator", func() error {
		return c.l.watch("ncclCommDestroy", []*Comm{c}, c.ownTimeout(), func() int32 { return gpurt.Call(c.l.commDestroy, h) })
	})
	if err == nil {
		c.mu.Lock()
		c.h = 0
		c.mu.Unlock()
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

// sendRecv enqueues call, a collective that reads sendCount elements of dt
// from send and writes recvCount into recv, once both buffers are checked
// to hold them.
func (c *Comm) sendRecv(a *alloc.Allocator, what, sym string, send alloc.Buffer, sendCount int64, recv alloc.Buffer, recvCount int64, dt DataType, call func(h, s uintptr) int32) error {
	if err := elems(what, send, sendCount, dt); err != nil {
		return err
	}
	if err := elems(what, recv, recvCount, dt); err != nil {
		return err
	}
	return c.enqueue(a, what, sym, []alloc.Buffer{send, recv}, call)
}

// AllReduce sums count elements of send over the ranks into recv
// (ncclAllReduce) on a's stream. send and recv may be the same buffer.
func (c *Comm) AllReduce(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType, op RedOp) error {
	return c.sendRecv(a, "all-reduce", "ncclAllReduce", send, count, recv, count, dt, func(h, s uintptr) int32 {
		return gpurt.Call(c.l.allReduce, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), uintptr(op), h, s)
	})
}

// AllGather writes every rank's count elements of send into recv, rank
// order (ncclAllGather): recv holds Ranks()*count elements.
func (c *Comm) AllGather(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType) error {
	return c.sendRecv(a, "all-gather", "ncclAllGather", send, count, recv, int64(c.ranks)*count, dt, func(h, s uintptr) int32 {
		return gpurt.Call(c.l.allGather, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), h, s)
	})
}

// ReduceScatter sums the ranks' send (Ranks()*count elements) and leaves
// this rank's count-element share in recv (ncclReduceScatter).
func (c *Comm) ReduceScatter(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType, op RedOp) error {
	return c.sendRecv(a, "reduce-scatter", "ncclReduceScatter", send, int64(c.ranks)*count, recv, count, dt, func(h, s uintptr) int32 {
		return gpurt.Call(c.l.reduceScatter, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), uintptr(op), h, s)
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
	// One group of sends and receives (NCCL's own all-to-all is the same
	// grouped calls), made on one thread, ended within a's watchdog.
	return a.Enqueue("nccl all-to-all", []alloc.Buffer{send, recv}, func(s driver.Stream) error {
		return c.l.grouped(func(g *group) error {
			h, err := c.handle("all-to-all")
			if err != nil {
				return err
			}
			g.add(c, a.WatchdogTimeout())
			for p := range c.ranks {
				off := uintptr(int64(p) * count * sz)
				if err := c.l.check("ncclSend", gpurt.Call(c.l.send, uintptr(send.Ptr())+off, uintptr(count), uintptr(dt), uintptr(p), h, uintptr(s))); err != nil {
					return err
				}
				if err := c.l.check("ncclRecv", gpurt.Call(c.l.recv, uintptr(recv.Ptr())+off, uintptr(count), uintptr(dt), uintptr(p), h, uintptr(s))); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// enqueue runs call (an NCCL call on c's handle and a's stream) through
// a.Enqueue: made at once, or recorded in a's capture with its buffers
// held by the graph. Inside a Group the call joins the group (NCCL queues
// it until ncclGroupEnd, which is watched); outside one it is watched
// itself, bounded by a's watchdog timeout.
func (c *Comm) enqueue(a *alloc.Allocator, what, sym string, uses []alloc.Buffer, call func(h, s uintptr) int32) error {
	return a.Enqueue("nccl "+what, uses, func(s driver.Stream) error {
		h, err := c.handle(what)
		if err != nil {
			return err
		}
		if g := c.l.currentGroup(); g != nil {
			g.add(c, a.WatchdogTimeout())
			if r := call(h, uintptr(s)); r != ncclInProgress {
				return c.l.check(sym, r)
			}
			return nil
		}
		return c.l.watch(sym, []*Comm{c}, a.WatchdogTimeout(), func() int32 { return call(h, uintptr(s)) })
	})
}
