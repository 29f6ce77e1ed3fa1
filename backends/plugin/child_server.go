package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// server is the child's side: one backend driver, opened by the host's
// first request, and the shared regions.
type server struct {
	regions *childRegions
	leases  spanLeases // streams held for the host's direct copies

	mu  sync.RWMutex
	drv alloc.Driver
}

func newServer() *server { return &server{regions: newChildRegions()} }

// Optional driver methods the host forwards when the backend has them.
const (
	capUsage = 1 << iota // alloc.UsageReporter
)

func (s *server) driver() (alloc.Driver, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.drv == nil {
		return nil, fmt.Errorf("%w: plugin: no backend open", alloc.ErrClosed)
	}
	return s.drv, nil
}

// call decodes one request, runs it and encodes the reply. A malformed
// request is an error reply, never a crash.
func (s *server) call(ctx context.Context, req []byte) []byte {
	out := &enc{b: make([]byte, 1, 32)} // b[0]: replyOK
	if len(req) == 0 {
		return errReply(errMalformed)
	}
	in := &dec{b: req[1:]}
	op := opcode(req[0])
	err := s.dispatch(ctx, op, in, out)
	if err == nil && in.err != nil {
		err = in.err
	}
	if err != nil {
		return errReply(err)
	}
	return out.b
}

func errReply(err error) []byte {
	e := &enc{}
	encodeErr(e, err)
	return e.b
}

func (s *server) dispatch(ctx context.Context, op opcode, in *dec, out *enc) error {
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
		out.u64(uint64(h))
		return err
	case opDestroyStream:
		return d.DestroyStream(alloc.Stream(in.u64()))
	case opStreamSynchronize:
		return d.StreamSynchronize(alloc.Stream(in.u64()))
	case opStreamQuery:
		done, err := d.StreamQuery(alloc.Stream(in.u64()))
		out.bool(done)
		return err
	case opStreamCaptureStatus:
		st, err := d.StreamCaptureStatus(alloc.Stream(in.u64()))
		out.u64(uint64(st))
		return err
	case opMalloc:
		p, err := d.Malloc(in.i64())
		out.u64(uint64(p))
		return err
	case opFree:
		return d.Free(alloc.DevicePtr(in.u64()))
	case opMallocAsync:
		size := in.i64()
		p, err := d.MallocAsync(size, alloc.Stream(in.u64()))
		out.u64(uint64(p))
		return err
	case opFreeAsync:
		p := alloc.DevicePtr(in.u64())
		return d.FreeAsync(p, alloc.Stream(in.u64()))
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
	case opCopyHtoDAsync, opCopyDtoHAsync, opCopyHtoD, opCopyDtoH:
		return s.copy(d, op, in)
	case opCopyDtoDAsync:
		dst, src, n := alloc.DevicePtr(in.u64()), alloc.DevicePtr(in.u64()), in.i64()
		return d.CopyDtoDAsync(dst, src, n, alloc.Stream(in.u64()))
	case opMemsetAsync:
		dst, v, n := alloc.DevicePtr(in.u64()), byte(in.u64()), in.i64()
		return d.MemsetAsync(dst, v, n, alloc.Stream(in.u64()))
	case opBeginCapture:
		st := alloc.Stream(in.u64())
		return d.BeginCapture(st, alloc.CaptureMode(in.u64()))
	case opEndCapture:
		g, err := d.EndCapture(alloc.Stream(in.u64()))
		out.u64(uint64(g))
		return err
	case opGraphInstantiate:
		g := alloc.GraphHandle(in.u64())
		e, err := d.GraphInstantiate(g, in.bool())
		out.u64(uint64(e))
		return err
	case opGraphLaunch:
		e := alloc.GraphExec(in.u64())
		return d.GraphLaunch(e, alloc.Stream(in.u64()))
	case opGraphExecDestroy:
		return d.GraphExecDestroy(alloc.GraphExec(in.u64()))
	case opGraphDestroy:
		return d.GraphDestroy(alloc.GraphHandle(in.u64()))
	case opUsage:
		if ur, ok := d.(alloc.UsageReporter); ok {
			u, err := ur.Usage()
			out.i64(u.Device).i64(u.Host)
			return err
		}
	case opDirectSpan:
		return s.directSpan(d, in, out)
	case opDirectDone:
		return s.leases.end(in.u64())
	}
	return fmt.Errorf("%w: plugin: backend %s does not implement %v", alloc.ErrDriver, d.Name(), op)
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
	if _, ok := d.(alloc.UsageReporter); ok {
		caps |= capUsage
	}
	out.str(d.Name()).str(d.CaptureDomain()).str(info.Name).i64(info.TotalMemory).i64(info.Alignment).bool(info.UnifiedMemory).u64(caps)
	return nil
}

func (s *server) hostAlloc(d alloc.Driver, size int64, out *enc) error {
	b, err := d.HostAlloc(size)
	if err != nil {
		return err
	}
	r := s.regions.byPtr(b)
	if r == nil {
		_ = d.HostFree(b)
		return fmt.Errorf("%w: plugin: backend %s does not take pinned memory from the plugin (backends.Choice.Memory)", alloc.ErrDriver, d.Name())
	}
	out.u64(r.id).i64(int64(r.fd))
	return nil
}

// copy runs a copy whose host side is [off, off+n) of a shared region: a
// host buffer (pinned, for the driver) or staging (pageable, for it).
func (s *server) copy(d alloc.Driver, op opcode, in *dec) error {
	dev := alloc.DevicePtr(in.u64())
	id, off, n := in.u64(), in.i64(), in.i64()
	st := alloc.Stream(in.u64())
	if in.err != nil {
		return in.err
	}
	host, err := s.regions.span(id, off, n)
	if err != nil {
		return err
	}
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
