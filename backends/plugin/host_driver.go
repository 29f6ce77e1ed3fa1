package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Driver is the host's side: an driver.Driver whose every call runs in the
// backend's process. It also implements driver.Aborter, so an allocator's
// watchdog kills a stuck backend at its deadline.
type Driver struct {
	name, domain string
	info         driver.DeviceInfo
	caps         uint64

	client      *goplugin.Client
	conn        *grpc.ClientConn
	proc        *process
	callTimeout time.Duration

	// ctx is cancelled when the backend dies, failing calls in flight.
	ctx    context.Context
	cancel context.CancelFunc
	dead   atomic.Pointer[error] // why every call now fails
	closed atomic.Bool

	regions hostRegions
	staging stagingPool
	direct  directCache
	// noDirect: the backend answered errNoDirect; pageable blocking copies
	// stage from then on.
	noDirect atomic.Bool

	mu    sync.Mutex
	pipe  pipeline     // operations not yet sent (host_pipeline.go)
	track captureTrack // streams and their capture status (host_capture.go)
	trips atomic.Int64 // round trips made, for tests
}

// The optional interfaces the host's Driver implements
// (alloc/driver/optional.go), checked when the package compiles. Not
// HostFuncLauncher (a Go closure cannot reach the backend's process,
// docs/plugin-mode.md) nor VirtualMemory (a reservation lives in the
// child's address space: TestHostDriverHasNoVirtualMemory).
var (
	_ driver.Aborter       = (*Driver)(nil)
	_ driver.MemInfoer     = (*Driver)(nil)
	_ driver.UsageReporter = (*Driver)(nil)
)

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Aborter       = (*Driver)(nil)
	_ driver.UsageReporter = (*Driver)(nil)
	_ driver.MemInfoer     = (*Driver)(nil)
)

// MemInfo is the backend's answer (driver.MemInfoer), or an error
// wrapping errors.ErrUnsupported when the backend cannot tell.
func (d *Driver) MemInfo() (free, total int64, err error) {
	if d.caps&capMemInfo == 0 {
		return 0, 0, fmt.Errorf("plugin %s: memory info: %w by the backend", d.name, errors.ErrUnsupported)
	}
	r, err := d.call(opMemInfo, newReq(opMemInfo))
	if err != nil {
		return 0, 0, err
	}
	free, total = r.i64(), r.i64()
	return free, total, r.err
}

// Usage is the backend's own count (driver.UsageReporter), or an error
// wrapping errors.ErrUnsupported when the backend does not count.
func (d *Driver) Usage() (driver.Usage, error) {
	if d.caps&capUsage == 0 {
		return driver.Usage{}, fmt.Errorf("plugin %s: memory usage: %w by the backend", d.name, errors.ErrUnsupported)
	}
	r, err := d.call(opUsage, newReq(opUsage))
	if err != nil {
		return driver.Usage{}, err
	}
	u := driver.Usage{Device: r.i64(), Host: r.i64()}
	return u, r.err
}

// PID is the backend process's id.
func (d *Driver) PID() int { return d.proc.pid }

// Name is "plugin:" and the backend's own name.
func (d *Driver) Name() string            { return d.name }
func (d *Driver) Info() driver.DeviceInfo { return d.info }

// CaptureDomain is the child's domain, qualified by the process: two
// backend processes never share captures.
func (d *Driver) CaptureDomain() string { return d.domain }

// call makes one round trip, after the operations queued before it
// (host_pipeline.go), which it carries when they have not been sent. A
// transport failure (the process died, or the call passed its deadline)
// marks the backend dead; every later call fails at once with the same
// cause. The failures of pipelined operations the reply reports are in
// r.async (withAsync); err is the call's own.
func (d *Driver) call(op opcode, req *enc) (*dec, error) {
	if err := d.deadErr(op); err != nil {
		return nil, err
	}
	return d.invoke(op.String(), d.frame(req))
}

// callUnordered is call for a request that must not wait for pipelined
// operations: DirectDone, which releases a stream that one of them may be
// waiting for.
func (d *Driver) callUnordered(op opcode, req *enc) (*dec, error) {
	if err := d.deadErr(op); err != nil {
		return nil, err
	}
	return d.invoke(op.String(), framed{b: append([]byte{0}, req.b...)})
}

// invoke sends a framed request; what names it in errors.
func (d *Driver) invoke(what string, f framed) (*dec, error) {
	ctx, cancel := context.WithTimeout(d.ctx, d.callTimeout)
	var out msg
	d.trips.Add(1)
	err := d.conn.Invoke(ctx, callMethod, &msg{b: f.b}, &out, grpc.CallContentSubtype(codecName))
	expired := ctx.Err() == context.DeadlineExceeded
	cancel()
	if err != nil {
		if expired && d.behind(f) {
			what += ", sent behind pipelined operations that had not run (one of them may be the call that hung),"
		}
		return nil, d.transportFailure(what, expired, err)
	}
	d.ran(f)
	r, err := decodeReply(out.b)
	if errors.Is(err, driver.ErrBackendHung) { // the child's wait behind pipelined operations timed out (child_pipeline.go)
		return nil, d.transportFailure(what+", sent behind pipelined operations that had not run (one of them may be the call that hung),", true, err)
	}
	if r != nil {
		d.applyView(r)
	}
	return r, err
}

// callErr is call for operations with no results.
func (d *Driver) callErr(op opcode, req *enc) error {
	_, err := d.call(op, req)
	return err
}

// callSync is callErr for a synchronizing call on a stream: it also
// reports the failures of pipelined operations on that stream.
func (d *Driver) callSync(op opcode, req *enc) error {
	return withAsync(d.call(op, req))
}

func (d *Driver) deadErr(op opcode) error {
	if p := d.dead.Load(); p != nil {
		return fmt.Errorf("plugin %s: %v: %w", d.name, op, *p)
	}
	if d.closed.Load() {
		return fmt.Errorf("%w: plugin %s: %v: driver is closed", alloc.ErrClosed, d.name, op)
	}
	return nil
}

// graceExit bounds how long a broken connection waits for the process to
// be reaped before the host kills it: a child that closed its socket but
// lingers is as good as crashed.
const graceExit = 50 * time.Millisecond

func (d *Driver) transportFailure(what string, expired bool, err error) error {
	if d.dead.Load() == nil && !d.closed.Load() {
		if expired {
			d.die(fmt.Errorf("%w: %s did not return within plugin.call_timeout=%v", driver.ErrBackendHung, what, d.callTimeout))
		} else {
			select {
			case <-d.proc.exited:
			case <-time.After(graceExit):
				d.proc.kill()
			}
			d.die(d.crashErr(err))
		}
	}
	if p := d.dead.Load(); p != nil {
		return fmt.Errorf("plugin %s: %s: %w", d.name, what, *p)
	}
	if d.closed.Load() {
		return fmt.Errorf("%w: plugin %s: %s: driver is closed", alloc.ErrClosed, d.name, what)
	}
	return fmt.Errorf("%w: plugin %s: %s: %v", driver.ErrDriver, d.name, what, err)
}

func (d *Driver) crashErr(cause error) error {
	<-d.proc.exited
	if cause != nil {
		return fmt.Errorf("%w: pid %d ended with %s (%v)", driver.ErrBackendCrashed, d.proc.pid, d.proc.status(), cause)
	}
	return fmt.Errorf("%w: pid %d ended with %s", driver.ErrBackendCrashed, d.proc.pid, d.proc.status())
}

// die records why the backend is dead (the first cause wins), kills the
// process and fails the calls in flight.
func (d *Driver) die(cause error) {
	if !d.dead.CompareAndSwap(nil, &cause) {
		return
	}
	d.proc.kill()
	d.cancel()
	d.wakeQueued()
}

// wakeQueued wakes callers waiting for room in the pipeline: the backend
// is gone, and they fail.
func (d *Driver) wakeQueued() {
	d.mu.Lock()
	d.pipe.space.Broadcast()
	d.mu.Unlock()
}

// watch marks the backend crashed the moment its process exits on its own.
func (d *Driver) watch() {
	<-d.proc.exited
	if !d.closed.Load() {
		d.die(d.crashErr(nil))
	}
}

// Abort kills the backend process at once (driver.Aborter): the allocator's
// watchdog gave up on a call. The stuck call, and every later one, fail
// with ErrBackendHung.
func (d *Driver) Abort(cause error) {
	d.die(fmt.Errorf("%w: aborted by the caller: %w", driver.ErrBackendHung, cause))
}

// Close closes the backend, stops its process and unmaps shared memory.
// After a crash it only releases this side and returns nil: there is
// nothing left to close. Host buffers still mapped read as zeros from now
// on instead of faulting.
func (d *Driver) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: plugin %s: close: driver is closed", alloc.ErrClosed, d.name)
	}
	d.wakeQueued()
	var err error
	if d.dead.Load() == nil {
		_, err = d.callClosing(opClose, newReq(opClose))
	}
	// The backend is closed: SIGKILL is the quick way out (a graceful
	// go-plugin shutdown waits for the child's exit hooks, a second under
	// the race detector). Kill then only tidies go-plugin's client.
	d.proc.kill()
	d.cancel()
	d.client.Kill()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range d.regions.takeAll() {
		if e := retire(m, !m.staging); e != nil {
			errs = append(errs, fmt.Errorf("%w: plugin: unmapping shared memory: %v", driver.ErrDriver, e))
		}
	}
	d.staging.drop()
	d.direct.drop()
	return errors.Join(errs...)
}

// callClosing is call for Close, which runs after closed is set (and
// after the operations queued before it).
func (d *Driver) callClosing(op opcode, req *enc) (*dec, error) {
	f := d.frame(req)
	ctx, cancel := context.WithTimeout(d.ctx, d.callTimeout)
	defer cancel()
	var out msg
	d.trips.Add(1)
	if err := d.conn.Invoke(ctx, callMethod, &msg{b: f.b}, &out, grpc.CallContentSubtype(codecName)); err != nil {
		return nil, fmt.Errorf("%w: plugin %s: close: %v", driver.ErrDriver, d.name, err)
	}
	return decodeReply(out.b)
}

func (d *Driver) CreateStream() (driver.Stream, error) {
	r, err := d.call(opCreateStream, newReq(opCreateStream))
	if err != nil {
		return 0, err
	}
	h := driver.Stream(r.u64())
	if r.err != nil {
		return 0, r.err
	}
	d.streamCreated(h)
	return h, nil
}

// DestroyStream also reports the failures of pipelined operations on s.
func (d *Driver) DestroyStream(s driver.Stream) error {
	r, err := d.call(opDestroyStream, newReq(opDestroyStream).u64(uint64(s)))
	if err == nil {
		d.streamDestroyed(s)
	}
	return withAsync(r, err)
}

// StreamSynchronize also reports the failures of pipelined operations on s.
func (d *Driver) StreamSynchronize(s driver.Stream) error {
	return d.callSync(opStreamSynchronize, newReq(opStreamSynchronize).u64(uint64(s)))
}

// StreamQuery also reports the failures of pipelined operations on s.
func (d *Driver) StreamQuery(s driver.Stream) (bool, error) {
	r, err := d.call(opStreamQuery, newReq(opStreamQuery).u64(uint64(s)))
	if err != nil {
		return false, withAsync(r, err)
	}
	done := r.bool()
	if r.err != nil {
		return false, r.err
	}
	return done, withAsync(r, nil)
}

func (d *Driver) Malloc(size int64) (driver.DevicePtr, error) {
	r, err := d.call(opMalloc, newReq(opMalloc).i64(size))
	if err != nil {
		return 0, err
	}
	return driver.DevicePtr(r.u64()), r.err
}

func (d *Driver) Free(p driver.DevicePtr) error {
	return d.callErr(opFree, newReq(opFree).u64(uint64(p)))
}

// MallocAsync is a round trip: the engine needs the address now, and an
// out-of-memory error at once (the allocator gives its cache back and
// retries).
func (d *Driver) MallocAsync(size int64, s driver.Stream) (driver.DevicePtr, error) {
	r, err := d.call(opMallocAsync, newReq(opMallocAsync).i64(size).u64(uint64(s)))
	if err != nil {
		return 0, err
	}
	return driver.DevicePtr(r.u64()), r.err
}

func (d *Driver) FreeAsync(p driver.DevicePtr, s driver.Stream) error {
	return d.pipelined(opFreeAsync, func(e *enc) { e.u64(uint64(p)).u64(uint64(s)) })
}

func (d *Driver) CopyDtoDAsync(dst, src driver.DevicePtr, n int64, s driver.Stream) error {
	return d.pipelined(opCopyDtoDAsync, func(e *enc) { e.u64(uint64(dst)).u64(uint64(src)).i64(n).u64(uint64(s)) })
}

func (d *Driver) MemsetAsync(dst driver.DevicePtr, value byte, n int64, s driver.Stream) error {
	return d.pipelined(opMemsetAsync, func(e *enc) { e.u64(uint64(dst)).u64(uint64(value)).i64(n).u64(uint64(s)) })
}

// BeginCapture turns pipelining off from the moment it is called: the
// operations queued before it are sent in front of it, and none after.
func (d *Driver) BeginCapture(s driver.Stream, mode alloc.CaptureMode) error {
	d.beginning(1)
	defer d.beginning(-1)
	return d.callErr(opBeginCapture, newReq(opBeginCapture).u64(uint64(s)).u64(uint64(mode)))
}

func (d *Driver) EndCapture(s driver.Stream) (driver.GraphHandle, error) {
	r, err := d.call(opEndCapture, newReq(opEndCapture).u64(uint64(s)))
	if err != nil {
		return 0, err
	}
	return driver.GraphHandle(r.u64()), r.err
}

func (d *Driver) GraphInstantiate(g driver.GraphHandle, autoFree bool) (driver.GraphExec, error) {
	r, err := d.call(opGraphInstantiate, newReq(opGraphInstantiate).u64(uint64(g)).bool(autoFree))
	if err != nil {
		return 0, err
	}
	return driver.GraphExec(r.u64()), r.err
}

func (d *Driver) GraphLaunch(e driver.GraphExec, s driver.Stream) error {
	return d.pipelined(opGraphLaunch, func(en *enc) { en.u64(uint64(e)).u64(uint64(s)) })
}

func (d *Driver) GraphExecDestroy(e driver.GraphExec) error {
	return d.callErr(opGraphExecDestroy, newReq(opGraphExecDestroy).u64(uint64(e)))
}

func (d *Driver) GraphDestroy(g driver.GraphHandle) error {
	return d.callErr(opGraphDestroy, newReq(opGraphDestroy).u64(uint64(g)))
}
