package cpu

import (
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

type opKind uint8

const (
	opMemset opKind = iota + 1
	opHtoD
	opDtoH
	opDtoD
	opFree  // stream-ordered release; never part of a graph
	opGraph // a graph launch: sub runs as one queue entry
	opHost  // a host function (LaunchHostFunc)
	// opPrefetch moves managed memory (PrefetchManaged): the bytes stay
	// where they are, so it only checks the allocation is alive.
	opPrefetch
)

// op is one unit of queued or captured work. It is a plain value rather than
// a closure so that enqueueing does not allocate. Allocations are resolved at
// enqueue time; running an op only checks that they are still alive.
type op struct {
	kind     opKind
	val      byte
	pageable bool // host is not pinned memory
	counted  bool // a queued launch counted in its graph's pending launches
	n        int64
	dst, src *allocation
	dstOff   int64
	srcOff   int64
	host     []byte // the caller's slice itself: replays see its current bytes
	sub      opChunks
	exec     *graphExec // the launched graph, checked when recorded as a child
	fn       func() error
}

func (d *Driver) run(o *op) error {
	if o.kind == opGraph {
		return d.runGraph(o)
	}
	if inReservation(o.dst, o.src) {
		d.vmMu.RLock() // its mapped chunks stay mapped (lockVM)
		defer d.vmMu.RUnlock()
	}
	switch o.kind {
	case opMemset:
		b, err := o.dst.span(o.dstOff, o.n, "memset")
		if err != nil {
			return err
		}
		fill(b, o.val)
	case opHtoD:
		b, err := o.dst.span(o.dstOff, o.n, "copy host to device")
		if err != nil {
			return err
		}
		copy(b, o.host)
	case opDtoH:
		b, err := o.src.span(o.srcOff, o.n, "copy device to host")
		if err != nil {
			return err
		}
		copy(o.host, b)
	case opDtoD:
		src, err := o.src.span(o.srcOff, o.n, "copy device to device")
		if err != nil {
			return err
		}
		dst, err := o.dst.span(o.dstOff, o.n, "copy device to device")
		if err != nil {
			return err
		}
		copy(dst, src)
	case opHost:
		return o.fn()
	case opPrefetch:
		_, err := o.dst.span(o.dstOff, o.n, "prefetch managed memory")
		return err
	case opFree:
		d.mu.Lock()
		d.releaseLocked(o.dst)
		d.mu.Unlock()
	}
	return nil
}

// runGraph runs a launched graph's ops in order, as one queue entry: a
// replay is a loop over the recorded list, with no lock, map lookup or
// allocation per op.
func (d *Driver) runGraph(o *op) error {
	var first error
	for _, ch := range o.sub {
		for i := range ch {
			if err := d.run(&ch[i]); err != nil && first == nil {
				first = err
			}
		}
	}
	if o.counted {
		d.mu.Lock()
		o.exec.g.pending--
		d.releaseIfUnusedLocked(o.exec.g)
		d.mu.Unlock()
	}
	return first
}

// fill sets b to v: one copy of a row of v (made on first use) for the
// first fillRow bytes, then doubling copies (memmove speed for any
// length). A replayed graph of small memsets spends most of its time here:
// doubling from one byte made eight memmove calls for 256 B.
func fill(b []byte, v byte) {
	if v == 0 {
		clear(b)
		return
	}
	row := fillRows[v].Load()
	if row == nil {
		row = new([fillRow]byte)
		for i := range row {
			row[i] = v
		}
		fillRows[v].Store(row) // a racing maker stores the same bytes
	}
	for i := copy(b, row[:]); i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
}

// fillRow is how many bytes of v fill copies at once before it doubles.
const fillRow = 256

// fillRows holds a row of each byte value, made the first time fill
// needs it.
var fillRows [256]atomic.Pointer[[fillRow]byte]

// noop is a zero-length operation: nothing to do, but an invalidated
// capture still says so.
func (d *Driver) noop(s *stream, what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return errDestroyed(s.h, what)
	}
	if c := s.cap; c != nil {
		d.mu.Lock()
		defer d.mu.Unlock()
		if c.state != captureActive {
			return c.invalidatedErr(what)
		}
	}
	return nil
}

// asyncOn opens an async operation on n bytes at p on stream h: refused
// on a closed driver, then the stream and the range resolved. done: the
// call is answered already, with err: a refusal, or for n == 0 a no-op
// (which an invalidated capture still fails). It makes the calls
// openStream would itself: these are the hot calls.
func (d *Driver) asyncOn(h driver.Stream, what string, p driver.DevicePtr, n int64) (s *stream, r *allocation, off int64, done bool, err error) {
	if d.closed.Load() {
		return nil, nil, 0, true, errClosed(what)
	}
	if s, err = d.stream(h, what); err != nil {
		return nil, nil, 0, true, err
	}
	r, off, why := d.resolve(p, n)
	if why != "" {
		return s, nil, 0, true, d.badRange(s, what, p, n, why)
	}
	if n == 0 {
		return s, nil, 0, true, d.noop(s, what)
	}
	return s, r, off, false, nil
}

// badRange fails an operation whose address does not resolve (and s's
// capture, if any).
func (d *Driver) badRange(s *stream, what string, p driver.DevicePtr, n int64, reason string) error {
	return d.failed(s, errf(driver.ErrInvalidValue, "%s %#x+%d: %s", what, uint64(p), n, reason))
}

func (d *Driver) MemsetAsync(dst driver.DevicePtr, value byte, n int64, h driver.Stream) error {
	const what = "memset"
	s, r, off, done, err := d.asyncOn(h, what, dst, n)
	if done {
		return err
	}
	o := op{kind: opMemset, val: value, n: n, dst: r, dstOff: off}
	return d.submit(s, &o, what)
}

func (d *Driver) CopyHtoDAsync(dst driver.DevicePtr, src []byte, h driver.Stream) error {
	const what = "copy host to device async"
	n := int64(len(src))
	s, r, off, done, err := d.asyncOn(h, what, dst, n)
	if done {
		return err
	}
	o := op{kind: opHtoD, n: n, dst: r, dstOff: off, host: src, pageable: !d.pinned(src)}
	return d.submit(s, &o, what)
}

// CopyDtoHAsync into pageable memory is synchronous, as in CUDA (it returns
// once dst holds the bytes); into pinned memory it is queued.
func (d *Driver) CopyDtoHAsync(dst []byte, src driver.DevicePtr, h driver.Stream) error {
	const what = "copy device to host async"
	n := int64(len(dst))
	s, r, off, done, err := d.asyncOn(h, what, src, n)
	if done {
		return err
	}
	if !d.pinned(dst) {
		s.mu.Lock()
		if s.cap != nil {
			err := d.refuseOnCapturing(s, what+" into pageable memory")
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		return d.blockingDtoH(h, dst, src, what)
	}
	o := op{kind: opDtoH, n: n, src: r, srcOff: off, host: dst}
	return d.submit(s, &o, what)
}

func (d *Driver) CopyDtoDAsync(dst, src driver.DevicePtr, n int64, h driver.Stream) error {
	const what = "copy device to device async"
	s, err := d.openStream(h, what)
	if err != nil {
		return err
	}
	rs, soff, why := d.resolve(src, n)
	if why != "" {
		return d.badRange(s, what+" (source)", src, n, why)
	}
	rd, doff, why := d.resolve(dst, n)
	if why != "" {
		return d.badRange(s, what+" (destination)", dst, n, why)
	}
	if n == 0 {
		return d.noop(s, what)
	}
	o := op{kind: opDtoD, n: n, dst: rd, dstOff: doff, src: rs, srcOff: soff}
	return d.submit(s, &o, what)
}

// CopyHtoD is cudaMemcpy ordered on s: it runs the queue (reporting queued
// work's failure), then copies at that place in the stream's order.
func (d *Driver) CopyHtoD(dst driver.DevicePtr, src []byte, h driver.Stream) error {
	const what = "copy host to device"
	if d.closed.Load() {
		return errClosed(what)
	}
	return d.blockingCopy(h, dst, src, true, what)
}

// CopyDtoH is cudaMemcpy ordered on s: it runs the queue, then copies.
func (d *Driver) CopyDtoH(dst []byte, src driver.DevicePtr, h driver.Stream) error {
	const what = "copy device to host"
	if d.closed.Load() {
		return errClosed(what)
	}
	return d.blockingDtoH(h, dst, src, what)
}

func (d *Driver) blockingDtoH(h driver.Stream, dst []byte, src driver.DevicePtr, what string) error {
	return d.blockingCopy(h, src, dst, false, what)
}

// blockingCopy copies between host and device range [p, p+len(host)) once
// s has run everything queued before it, holding s's place in its order
// (waitThen). The address resolves after the queue ran, since queued frees
// may have released it.
func (d *Driver) blockingCopy(h driver.Stream, p driver.DevicePtr, host []byte, toDevice bool, what string) error {
	return d.waitThen(h, what, copyInteraction, func() error {
		n := int64(len(host))
		r, off, why := d.resolve(p, n)
		if why != "" {
			return errf(driver.ErrInvalidValue, "%s %#x+%d: %s", what, uint64(p), n, why)
		}
		defer d.lockVM(r, nil)()
		b, err := r.span(off, n, what)
		if err != nil {
			return err
		}
		if toDevice {
			copy(b, host)
		} else {
			copy(host, b)
		}
		return nil
	})
}

// LaunchHostFunc queues fn on the stream (cudaLaunchHostFunc): it runs when
// the stream reaches it, in order, and at every replay when captured. An
// error from fn fails the stream like a failed kernel.
func (d *Driver) LaunchHostFunc(h driver.Stream, fn func() error) error {
	const what = "launch host function"
	if d.closed.Load() {
		return errClosed(what)
	}
	if fn == nil {
		return errf(driver.ErrInvalidValue, "%s: nil function", what)
	}
	s, err := d.stream(h, what)
	if err != nil {
		return err
	}
	o := op{kind: opHost, fn: fn}
	return d.submit(s, &o, what)
}
