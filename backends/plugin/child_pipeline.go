package plugin

import (
	"context"
	"fmt"
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The backend's side of pipelining (host_pipeline.go). Batches run in the
// order the host formed them, and every request first waits until the
// batches formed before it have run: gRPC serves each request on its own
// goroutine, so arrival order means nothing. A pipelined operation's
// failure is kept for the next synchronizing call on its stream.

// pipeOrder counts the batches run so far.
type pipeOrder struct {
	mu   sync.Mutex
	done uint64
	next chan struct{} // closed when done moves; nil until someone waits
}

// wait returns once after batches have run, or when the host gave up on
// the request (then the host is killing this process).
func (p *pipeOrder) wait(ctx context.Context, after uint64) error {
	for {
		p.mu.Lock()
		if p.done >= after {
			p.mu.Unlock()
			return nil
		}
		if p.next == nil {
			p.next = make(chan struct{})
		}
		ch := p.next
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			// The call's deadline passed behind a pipelined operation that
			// has not returned: the host must treat it as hung, even when
			// this reply reaches it a moment before its own timer fires.
			return fmt.Errorf("%w: plugin: waiting for pipelined operations: %v", driver.ErrBackendHung, ctx.Err())
		}
	}
}

func (p *pipeOrder) advance(to uint64) {
	p.mu.Lock()
	p.done = to
	if p.next != nil {
		close(p.next)
		p.next = nil
	}
	p.mu.Unlock()
}

// failedOp is a pipelined operation's failure.
type failedOp struct {
	op  opcode
	err error
}

// maxFailedKept bounds the failures kept per stream; later ones are
// counted, and reported as one.
const maxFailedKept = 64

type failedList struct {
	ops     []failedOp
	dropped int
}

// failedOps holds the failures of pipelined operations per stream, in the
// order they ran, until a synchronizing call on the stream takes them.
type failedOps struct {
	mu sync.Mutex
	by map[driver.Stream]*failedList
}

func (f *failedOps) add(s driver.Stream, op opcode, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = map[driver.Stream]*failedList{}
	}
	l := f.by[s]
	if l == nil {
		l = &failedList{}
		f.by[s] = l
	}
	if len(l.ops) < maxFailedKept {
		l.ops = append(l.ops, failedOp{op, err})
	} else {
		l.dropped++
	}
}

// take returns and forgets s's failures.
func (f *failedOps) take(s driver.Stream) []failedOp {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.by[s]
	if l == nil {
		return nil
	}
	delete(f.by, s)
	if l.dropped > 0 {
		l.ops = append(l.ops, failedOp{opBatch, fmt.Errorf("%w: plugin: %d more pipelined operations on stream %#x failed (the first %d are reported)",
			driver.ErrDriver, l.dropped, uint64(s), maxFailedKept)})
	}
	return l.ops
}

// runBatch runs the batch the host formed after `after` others, then the
// call it carries, if any. Each operation's failure is kept for its
// stream; the next batch may run as soon as this one's operations have.
func (s *server) runBatch(ctx context.Context, after uint64, in *dec, rep *reply) error {
	n := in.u64()
	d, derr := s.driver()
	for i := uint64(0); i < n && in.err == nil; i++ {
		op := opcode(in.byte())
		if derr != nil {
			in.fail()
			break
		}
		st, err := s.runQueued(d, op, in)
		if err != nil && in.err == nil {
			s.failed.add(st, op, err)
		}
	}
	s.order.advance(after + 1)
	if derr != nil {
		return derr
	}
	if in.err != nil || len(in.b) == 0 {
		return in.err
	}
	return s.dispatch(ctx, opcode(in.byte()), in, rep)
}

// runQueued decodes and makes one operation that may be pipelined, and
// says on which stream.
func (s *server) runQueued(d driver.Driver, op opcode, in *dec) (driver.Stream, error) {
	switch op {
	case opMemsetAsync:
		dst, v, n, st := driver.DevicePtr(in.u64()), byte(in.u64()), in.i64(), driver.Stream(in.u64())
		if in.err != nil {
			return st, in.err
		}
		return st, d.MemsetAsync(dst, v, n, st)
	case opCopyDtoDAsync:
		dst, src, n, st := driver.DevicePtr(in.u64()), driver.DevicePtr(in.u64()), in.i64(), driver.Stream(in.u64())
		if in.err != nil {
			return st, in.err
		}
		return st, d.CopyDtoDAsync(dst, src, n, st)
	case opFreeAsync:
		p, st := driver.DevicePtr(in.u64()), driver.Stream(in.u64())
		if in.err != nil {
			return st, in.err
		}
		return st, d.FreeAsync(p, st)
	case opGraphLaunch:
		e, st := driver.GraphExec(in.u64()), driver.Stream(in.u64())
		if in.err != nil {
			return st, in.err
		}
		return st, d.GraphLaunch(e, st)
	case opCopyHtoDAsync, opCopyDtoHAsync:
		return s.copy(d, op, in)
	}
	in.fail()
	return 0, in.err
}
