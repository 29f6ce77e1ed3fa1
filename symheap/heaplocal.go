package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
)

// The host heap's local work: host functions on the rank's stream, which
// read and write the bytes at run time, like the collectives.

// Write copies dst.Size bytes of src, from srcOff, into this rank's dst
// in stream order: every replay copies the host buffer's bytes as they
// are then.
func (h *Heap) Write(dst Tensor, src *alloc.HostBuffer, srcOff int64) error {
	return h.hostCopy("Write", "from", dst, src, srcOff, func(t, b []byte) { copy(t, b) })
}

// Read copies this rank's src into dst at dstOff, in stream order.
func (h *Heap) Read(dst *alloc.HostBuffer, dstOff int64, src Tensor) error {
	return h.hostCopy("Read", "into", src, dst, dstOff, func(t, b []byte) { copy(b, t) })
}

// hostCopy checks t and the t.Size bytes of hb at off, then runs move on
// them (this rank's bytes of t, hb's) in stream order as op; a host
// buffer closed by then fails the copy ("op from/into a closed host
// buffer").
func (h *Heap) hostCopy(op, dir string, t Tensor, hb *alloc.HostBuffer, off int64, move func(t, b []byte)) error {
	if err := h.checkHost(t, hb, off); err != nil {
		return err
	}
	return h.launch(op, 0, func(arrival) error {
		b := hb.Bytes()
		if b == nil {
			return fmt.Errorf("%w: symheap: %s %s a closed host buffer", alloc.ErrInvalidBuffer, op, dir)
		}
		move(h.peer(h.rank, t), b[off:off+t.Size])
		return nil
	})
}

// CopyLocal copies src into dst within this rank's heap, in stream order.
func (h *Heap) CopyLocal(dst, src Tensor) error {
	if err := h.bump.checkPair(dst, src); err != nil {
		return err
	}
	return h.launch("CopyLocal", 0, func(arrival) error {
		copy(h.peer(h.rank, dst), h.peer(h.rank, src))
		return nil
	})
}

// Axpy computes y = a*x + y over this rank's float32 elements, in stream
// order.
func (h *Heap) Axpy(y, x Tensor, a float32) error {
	if err := h.bump.checkPair(y, x); err != nil {
		return err
	}
	if err := h.bump.checkElems(y, Float32); err != nil {
		return err
	}
	return h.launch("Axpy", 0, func(arrival) error {
		ys, xs := elems[float32](h.peer(h.rank, y)), elems[float32](h.peer(h.rank, x))
		for i := range ys {
			ys[i] += a * xs[i]
		}
		return nil
	})
}

// Synchronize waits for the rank's stream; the heap's failure, if any, is
// in its error (the failed collective failed the stream) and in Err.
func (h *Heap) Synchronize() error {
	if err := h.a.Synchronize(); err != nil {
		return err
	}
	return h.Err()
}

// checkHost checks a tensor of this heap against t.Size bytes of a host
// buffer from off.
func (h *Heap) checkHost(t Tensor, b *alloc.HostBuffer, off int64) error {
	if err := h.check(t); err != nil {
		return err
	}
	return checkHostRange(t, b, off)
}
