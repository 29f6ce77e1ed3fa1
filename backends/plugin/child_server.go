package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// server is the child's side: one backend driver, opened by the host's
// first request, and the shared regions.
type server struct {
	regions *childRegions
	leases  spanLeases  // streams held for the host's direct copies
	order   pipeOrder   // batches run so far (child_pipeline.go)
	failed  failedOps   // failures of pipelined operations, per stream
	view    captureView // the streams whose capture status replies carry

	mu  sync.RWMutex
	drv driver.Driver
}

func newServer() *server { return &server{regions: newChildRegions()} }

// Optional driver methods the host forwards when the backend has them.
const (
	capUsage   = 1 << iota // driver.UsageReporter
	capMemInfo             // driver.MemInfoer
)

func (s *server) driver() (driver.Driver, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.drv == nil {
		return nil, fmt.Errorf("%w: plugin: no backend open", alloc.ErrClosed)
	}
	return s.drv, nil
}

// reply is what a call puts in its reply besides its error: results, and
// the failures of pipelined operations it reports.
type reply struct {
	out    enc
	failed []failedOp
	stream driver.Stream // theirs
}

// report attaches the failures of pipelined operations on st: the call
// synchronizes st.
func (r *reply) report(s *server, st driver.Stream) {
	r.failed, r.stream = s.failed.take(st), st
}

// call decodes one request, runs it once the batches formed before it
// have run, and encodes the reply. A malformed request is an error reply,
// never a crash.
func (s *server) call(ctx context.Context, req []byte) []byte {
	in := &dec{b: req}
	after := in.u64()
	op := opcode(in.byte())
	rep := &reply{out: enc{b: make([]byte, 0, 32)}}
	err := in.err
	if err == nil {
		err = s.order.wait(ctx, after)
	}
	if err == nil {
		if op == opBatch {
			err = s.runBatch(ctx, after, in, rep)
		} else {
			err = s.dispatch(ctx, op, in, rep)
		}
		if err == nil && in.err != nil {
			err = in.err
		}
	}
	return s.encodeReply(rep, err)
}

// encodeReply writes the status, the capture view, the reported failures,
// then the results or err.
func (s *server) encodeReply(r *reply, err error) []byte {
	e := &enc{b: make([]byte, 1, 16+len(r.out.b))}
	if err != nil {
		e.b[0] = replyErr
	}
	s.view.encode(s.driverOrNil(), e)
	e.u64(uint64(len(r.failed)))
	for _, f := range r.failed {
		e.u64(uint64(f.op)).u64(uint64(r.stream))
		encodeErr(e, f.err)
	}
	if err != nil {
		encodeErr(e, err)
	} else {
		e.b = append(e.b, r.out.b...)
	}
	return e.b
}

func (s *server) driverOrNil() driver.Driver {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.drv
}

func (s *server) dispatch(ctx context.Context, op opcode, in *dec, rep *reply) error {
	out := &rep.out
	if op == opOpen {
		return s.open(ctx, in, out)
	}
	d, err := s.driver()
	if err != nil {
		return err
	}
	switch op {
	case opClose:
		s.mu.Lock()
		s.drv = nil
		s.mu.Unlock()
		return d.Close()
	case opCreateStream:
		h, err := d.CreateStream()
		if err == nil {
			s.view.add(h)
		}
		out.u64(uint64(h))
		return err
	case opDestroyStream:
		st := driver.Stream(in.u64())
		err := d.DestroyStream(st)
		if err == nil {
			s.view.remove(st)
		}
		rep.report(s, st)
		return err
	case opStreamSynchronize:
		st := driver.Stream(in.u64())
		err := d.StreamSynchronize(st)
		rep.report(s, st)
		return err
	case opStreamQuery:
		st := driver.Stream(in.u64())
		done, err := d.StreamQuery(st)
		rep.report(s, st)
		out.bool(done)
		return err
	case opStreamCaptureStatus:
		st, err := d.StreamCaptureStatus(driver.Stream(in.u64()))
		out.u64(uint64(st))
		return err
	case opMalloc:
		p, err := d.Malloc(in.i64())
		out.u64(uint64(p))
		return err
	case opFree:
		return d.Free(driver.DevicePtr(in.u64()))
	case opMallocAsync:
		size := in.i64()
		p, err := d.MallocAsync(size, driver.Stream(in.u64()))
		out.u64(uint64(p))
		return err
	case opHostAlloc:
		return s.hostAlloc(d, in.i64(), out)
	case opHostFree:
		r := s.regions.get(in.u64())
		if r == nil {
			return fmt.Errorf("%w: plugin: host free of an unknown shared region", alloc.ErrInvalidValue)
		}
		return d.HostFree(r.buf)
	case opStagingAlloc:
		r, err := s.regions.create(in.i64())
		if err != nil {
			return fmt.Errorf("%w: plugin: staging memory: %v", alloc.ErrOutOfMemory, err)
		}
		out.u64(r.id).i64(int64(r.fd))
		return nil
	case opStagingFree:
		r := s.regions.get(in.u64())
		if r == nil {
			return fmt.Errorf("%w: plugin: unknown staging region", alloc.ErrInvalidValue)
		}
		return s.regions.remove(r)
	case opCopyHtoD, opCopyDtoH:
		st, err := s.copy(d, op, in)
		rep.report(s, st)
		return err
	case opCopyHtoDAsync, opCopyDtoHAsync, opCopyDtoDAsync, opMemsetAsync, opFreeAsync, opGraphLaunch:
		_, err := s.runQueued(d, op, in)
		return err
	case opBeginCapture:
		st := driver.Stream(in.u64())
		return d.BeginCapture(st, alloc.CaptureMode(in.u64()))
	case opEndCapture:
		g, err := d.EndCapture(driver.Stream(in.u64()))
		out.u64(uint64(g))
		return err
	case opGraphInstantiate:
		g := driver.GraphHandle(in.u64())
		e, err := d.GraphInstantiate(g, in.bool())
		out.u64(uint64(e))
		return err
	case opGraphExecDestroy:
		return d.GraphExecDestroy(driver.GraphExec(in.u64()))
	case opGraphDestroy:
		return d.GraphDestroy(driver.GraphHandle(in.u64()))
	case opUsage:
		if ur, ok := d.(driver.UsageReporter); ok {
			u, err := ur.Usage()
			out.i64(u.Device).i64(u.Host)
			return err
		}
	case opMemInfo:
		if mi, ok := d.(driver.MemInfoer); ok {
			free, total, err := mi.MemInfo()
			out.i64(free).i64(total)
			return err
		}
	case opDirectSpan:
		return s.directSpan(d, in, rep)
	case opDirectDone:
		return s.leases.end(in.u64())
	}
	return fmt.Errorf("%w: plugin: backend %s does not implement %v", driver.ErrDriver, d.Name(), op)
}

func (s *server) open(ctx context.Context, in *dec, out *enc) error {
	name := in.str()
	n := in.u64()
	opts := backends.Options{}
	for i := uint64(0); i < n && in.err == nil; i++ {
		k := in.str()
		opts[k] = in.str()
	}
	if in.err != nil {
		return in.err
	}
	if name == "" {
		names := backends.Names()
		if len(names) != 1 {
			return fmt.Errorf("%w: plugin binary serves %s: name one with plugin.backend=NAME", errInvalidConfig, strings.Join(names, ", "))
		}
		name = names[0]
	}
	if strings.Contains(name, ":") {
		return fmt.Errorf("%w: plugin: %q: a plugin runs a registered backend, not another scheme", errInvalidConfig, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drv != nil {
		return fmt.Errorf("%w: plugin: a backend is already open in this process", alloc.ErrInvalidValue)
	}
	mem := backends.Memory{Host: s.regions, Device: s.regions}
	d, err := backends.Choice{Name: name, Options: opts, Memory: mem}.Open(ctx)
	if err != nil {
		return err
	}
	s.drv = d
	info := d.Info()
	var caps uint64
	if _, ok := d.(driver.UsageReporter); ok {
		caps |= capUsage
	}
	if _, ok := d.(driver.MemInfoer); ok {
		caps |= capMemInfo
	}
	out.str(d.Name()).str(d.CaptureDomain()).str(info.Name).i64(info.TotalMemory).i64(info.Alignment).bool(info.UnifiedMemory).u64(caps)
	// The safety profile (docs/capture-safety.md), last: a host that
	// predates it reads no further.
	out.bool(info.Integrated).bool(info.PageableMemoryAccess).str(info.ComputeCapability).i64(int64(info.CaptureSafety)).str(info.Profile)
	return nil
}

func (s *server) hostAlloc(d driver.Driver, size int64, out *enc) error {
	b, err := d.HostAlloc(size)
	if err != nil {
		return err
	}
	r := s.regions.byPtr(b)
	if r == nil {
		_ = d.HostFree(b)
		return fmt.Errorf("%w: plugin: backend %s does not take pinned memory from the plugin (backends.Choice.Memory)", driver.ErrDriver, d.Name())
	}
	out.u64(r.id).i64(int64(r.fd))
	return nil
}

// copy runs a copy whose host side is [off, off+n) of a shared region: a
// host buffer (pinned, for the driver) or staging (pageable, for it).
func (s *server) copy(d driver.Driver, op opcode, in *dec) (driver.Stream, error) {
	dev := driver.DevicePtr(in.u64())
	id, off, n := in.u64(), in.i64(), in.i64()
	st := driver.Stream(in.u64())
	if in.err != nil {
		return st, in.err
	}
	host, err := s.regions.span(id, off, n)
	if err != nil {
		return st, err
	}
	return st, s.copySpan(d, op, dev, host, st)
}

func (s *server) copySpan(d driver.Driver, op opcode, dev driver.DevicePtr, host []byte, st driver.Stream) error {
	switch op {
	case opCopyHtoDAsync:
		return d.CopyHtoDAsync(dev, host, st)
	case opCopyDtoHAsync:
		return d.CopyDtoHAsync(host, dev, st)
	case opCopyHtoD:
		return d.CopyHtoD(dev, host, st)
	default:
		return d.CopyDtoH(host, dev, st)
	}
}

// closeAll closes a backend the host left open (it went away).
func (s *server) closeAll() {
	s.mu.Lock()
	d := s.drv
	s.drv = nil
	s.mu.Unlock()
	if d != nil {
		_ = d.Close()
	}
}
