package plugin

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Pipelining. A stream-ordered call whose only result
// is an error (MemsetAsync, CopyDtoDAsync, FreeAsync, GraphLaunch, an async
// copy to or from a host buffer) costs no round trip while no capture is
// under way in the backend: it is queued here and sent without waiting, in
// batches, as a GPU driver queues launches. One flusher goroutine sends a
// batch whenever operations are waiting and its previous batch came back,
// so a tight loop fills each batch while the last one is on the wire. Any
// other call carries the waiting operations in front of itself, in the
// same message, and every request says how many batches were formed before
// it: the backend runs batches in that order and each call after the
// batches formed before it (child_pipeline.go). So a call runs after every
// operation this process queued before making it, whichever goroutine sent
// what.
//
// A queued operation's failure is kept by the backend, per stream, and
// reported as an *AsyncError by the next synchronizing call on that stream
// (StreamSynchronize, StreamQuery, a blocking copy, DestroyStream), in the
// order the operations ran, before the call's own error: where CUDA reports
// the failure of work it ran asynchronously. During a capture nothing is
// queued: the capture's rules need a refused call to fail where it is made
// (and invalidate the capture then), so every call is a round trip again.

// maxPipelined and maxPipelinedBytes bound the operations waiting to be
// sent; a caller past them waits for the flusher, as a full GPU command
// queue makes a launch wait.
const (
	maxPipelined      = 1024
	maxPipelinedBytes = 64 << 10
)

// pipeline is the host's queue of operations not yet sent. Driver.mu
// guards it.
type pipeline struct {
	enc                // the queued operations, encoded as a batch's body
	n        int       // how many
	formed   uint64    // batches formed so far: the order the backend runs them in
	ran      uint64    // the last batch known to have run (its reply came back)
	flushing bool      // the flusher goroutine runs
	space    sync.Cond // signalled when the queue is taken or the backend dies (L: Driver.mu)
}

// AsyncError is the failure of an operation the host pipelined: it was
// sent without waiting, so a later synchronizing call on the same stream
// reports it. errors.Is finds the alloc sentinel the backend's error
// wrapped; Op says which call failed.
type AsyncError struct {
	Op     string // the Driver method, "MemsetAsync"
	Stream driver.Stream
	Err    error
}

func (e *AsyncError) Error() string {
	return fmt.Sprintf("pipelined %s on stream %#x (reported by a later synchronizing call): %v", e.Op, uint64(e.Stream), e.Err)
}

func (e *AsyncError) Unwrap() error { return e.Err }

// enqueue queues op, whose arguments args encodes, and starts the flusher
// if it is not running. queued is false while a capture is under way or
// beginning in the backend: the caller then makes the call itself. args
// must not keep the encoder.
func (d *Driver) enqueue(op opcode, args func(e *enc)) (queued bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := &d.pipe
	for {
		if err := d.deadErr(op); err != nil {
			return true, err
		}
		if d.track.capturingLocked() {
			return false, nil
		}
		if p.n < maxPipelined && len(p.b) < maxPipelinedBytes {
			break
		}
		p.space.Wait()
	}
	p.b = append(p.b, byte(op))
	args(&p.enc)
	p.n++
	if !p.flushing {
		p.flushing = true
		go d.flush()
	}
	return true, nil
}

// framed is a request ready to send: b runs after `after` batches and
// carries n queued operations, as batch after+1, in front of its call.
type framed struct {
	b     []byte
	after uint64
	n     int
}

// frameLocked makes a request of the call req (nil: a batch alone): the
// number of batches formed before it, then, when operations are queued,
// those as a batch in front of the call. Driver.mu held.
func (d *Driver) frameLocked(req []byte) framed {
	p := &d.pipe
	f := framed{after: p.formed, n: p.n}
	if p.n == 0 {
		f.b = make([]byte, 0, binary.MaxVarintLen64+len(req))
		f.b = binary.AppendUvarint(f.b, p.formed)
		f.b = append(f.b, req...)
		return f
	}
	f.b = make([]byte, 0, 2*binary.MaxVarintLen64+1+len(p.b)+len(req))
	f.b = binary.AppendUvarint(f.b, p.formed)
	f.b = append(f.b, byte(opBatch))
	f.b = binary.AppendUvarint(f.b, uint64(p.n))
	f.b = append(f.b, p.b...)
	f.b = append(f.b, req...)
	p.formed++
	p.b, p.n = p.b[:0], 0
	p.space.Broadcast()
	return f
}

// frame is frameLocked for a call.
func (d *Driver) frame(req *enc) framed {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.frameLocked(req.b)
}

// ran records that f's reply came back: the batches up to it have run.
func (d *Driver) ran(f framed) {
	k := f.after
	if f.n > 0 {
		k++
	}
	d.mu.Lock()
	d.pipe.ran = max(d.pipe.ran, k)
	d.mu.Unlock()
}

// behind says whether f had to wait, in the backend, for pipelined
// operations not known to have run: when f passes its deadline, one of
// them may be the call that hung.
func (d *Driver) behind(f framed) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return f.n > 0 || f.after > d.pipe.ran
}

// flush sends batches until nothing is queued. A batch that fails as a
// whole (not one of its operations: a malformed message) leaves the order
// of everything after it unknown, so the backend is given up.
func (d *Driver) flush() {
	for {
		d.mu.Lock()
		if d.pipe.n == 0 || d.deadErr(opBatch) != nil {
			d.pipe.flushing = false
			d.mu.Unlock()
			return
		}
		f := d.frameLocked(nil)
		d.mu.Unlock()
		what := fmt.Sprintf("a batch of %d pipelined operations", f.n)
		if _, err := d.invoke(what, f); err != nil && d.dead.Load() == nil && !d.closed.Load() {
			d.die(fmt.Errorf("%w: plugin %s: %s failed: %w", driver.ErrDriver, d.name, what, err))
		}
	}
}

// pipelined makes op through the pipeline, or as a round trip during a
// capture.
func (d *Driver) pipelined(op opcode, args func(e *enc)) error {
	if queued, err := d.enqueue(op, args); queued {
		return err
	}
	req := newReq(op)
	args(req)
	return d.callErr(op, req)
}

// joinAsync puts async (from withAsync) before err.
func joinAsync(async, err error) error {
	if async == nil {
		return err
	}
	if err == nil {
		return async
	}
	return errors.Join(async, err)
}

// withAsync joins the failures of pipelined operations a synchronizing
// call reported (before it, in the order they ran) with its own error.
func withAsync(r *dec, err error) error {
	if r == nil || len(r.async) == 0 {
		return err
	}
	return errors.Join(append(r.async[:len(r.async):len(r.async)], err)...)
}
