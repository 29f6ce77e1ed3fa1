package nccl

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// Point-to-point and rooted collectives, through Allocator.Enqueue like
// the others: made at once, or recorded in the allocator's capture (their
// buffers held by the graph), refused in any other capture; watched
// outside a Group, joined to it inside one.

// rankArg checks that r names a rank of c.
func (c *Comm) rankArg(what, role string, r int) error {
	if r < 0 || r >= c.ranks {
		return fmt.Errorf("%w: nccl: %s: %s %d outside %s", alloc.ErrInvalidValue, what, role, r, c)
	}
	return nil
}

// Send sends count elements of buf to rank peer (ncclSend). The peer's
// matching Recv must be in flight at the same time: two ranks that send to
// each other, or a rank that sends to itself, put both calls in one Group.
func (c *Comm) Send(a *alloc.Allocator, buf alloc.Buffer, count int64, dt DataType, peer int) error {
	return c.p2p(a, "send", "ncclSend", c.l.send, buf, count, dt, peer)
}

// Recv receives count elements from rank peer into buf (ncclRecv).
func (c *Comm) Recv(a *alloc.Allocator, buf alloc.Buffer, count int64, dt DataType, peer int) error {
	return c.p2p(a, "recv", "ncclRecv", c.l.recv, buf, count, dt, peer)
}

// p2p enqueues fn, the library's ncclSend or ncclRecv (named sym), for
// count elements of buf with rank peer, once both are checked.
func (c *Comm) p2p(a *alloc.Allocator, what, sym string, fn uintptr, buf alloc.Buffer, count int64, dt DataType, peer int) error {
	if err := c.rankArg(what, "peer", peer); err != nil {
		return err
	}
	if err := elems(what, buf, count, dt); err != nil {
		return err
	}
	return c.enqueue(a, what, sym, []alloc.Buffer{buf}, func(h, s uintptr) int32 {
		return gpurt.Call(fn, uintptr(buf.Ptr()), uintptr(count), uintptr(dt), uintptr(peer), h, s)
	})
}

// Broadcast copies count elements of root's send into every rank's recv
// (ncclBroadcast). send is read on root only; send and recv may be the
// same buffer.
func (c *Comm) Broadcast(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType, root int) error {
	if err := c.rankArg("broadcast", "root", root); err != nil {
		return err
	}
	return c.sendRecv(a, "broadcast", "ncclBroadcast", send, count, recv, count, dt, func(h, s uintptr) int32 {
		return gpurt.Call(c.l.broadcast, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), uintptr(root), h, s)
	})
}

// Reduce combines count elements of every rank's send with op into root's
// recv (ncclReduce). recv is written on root only; send and recv may be
// the same buffer.
func (c *Comm) Reduce(a *alloc.Allocator, send, recv alloc.Buffer, count int64, dt DataType, op RedOp, root int) error {
	if err := c.rankArg("reduce", "root", root); err != nil {
		return err
	}
	return c.sendRecv(a, "reduce", "ncclReduce", send, count, recv, count, dt, func(h, s uintptr) int32 {
		return gpurt.Call(c.l.reduce, uintptr(send.Ptr()), uintptr(recv.Ptr()), uintptr(count), uintptr(dt), uintptr(op), uintptr(root), h, s)
	})
}
