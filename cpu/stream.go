package cpu

import (
	"bytes"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// stream is an in-order queue of work that runs lazily: only when the host
// waits for it (synchronize, query, a blocking copy) or when the queue is
// full. Results are therefore never visible early, deterministically, so an
// engine that reads before it synchronizes fails on a laptop too.
type stream struct {
	h driver.Stream

	// execMu serializes draining, so batches run in submission order and a
	// synchronize waits for a drain another goroutine has started.
	execMu sync.Mutex

	mu    sync.Mutex
	queue []op
	spare []op     // the previous batch's buffer, reused to keep enqueue allocation-free
	err   error    // first failure of queued work, reported by the next wait
	cap   *capture // non-nil while capturing (also once invalidated, until EndCapture)
	// capturing mirrors cap != nil so the capture-status query, made by
	// the allocator before every operation, takes no lock when idle.
	capturing atomic.Bool
	destroyed bool

	// freed lists the allocations whose FreeAsync is queued here, oldest
	// first (some reused or released already: allocation.freedOn says),
	// and freedBytes what those not yet reused or released count against
	// the limit: what a MallocAsync here may reuse. Guarded by Driver.mu.
	freed      []*allocation
	freedBytes int64
}

// hotStreams is the number of Driver.hot slots.
const hotStreams = 64

func (d *Driver) stream(h driver.Stream, what string) (*stream, error) {
	if s := d.hot[uint64(h)%hotStreams].Load(); s != nil && s.h == h {
		return s, nil
	}
	if s := (*d.streams.Load())[h]; s != nil {
		return s, nil
	}
	return nil, errf(driver.ErrInvalidValue, "%s: unknown stream %#x", what, uint64(h))
}

// openStream is the start of a call on stream h: refused on a closed
// driver, then h looked up.
func (d *Driver) openStream(h driver.Stream, what string) (*stream, error) {
	if d.closed.Load() {
		return nil, errClosed(what)
	}
	return d.stream(h, what)
}

func errDestroyed(h driver.Stream, what string) error {
	return errf(driver.ErrInvalidValue, "%s: stream %#x was destroyed", what, uint64(h))
}

// CreateStream makes a new stream. There is no default stream: handle 0 is
// never valid.
func (d *Driver) CreateStream() (driver.Stream, error) {
	if d.closed.Load() {
		return 0, errClosed("create stream")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return 0, errClosed("create stream")
	}
	s := &stream{h: driver.Stream(d.handle())}
	m := maps.Clone(*d.streams.Load())
	m[s.h] = s
	d.streams.Store(&m)
	d.hot[uint64(s.h)%hotStreams].Store(s)
	return s.h, nil
}

// DestroyStream lets queued work finish (as cudaStreamDestroy does) and
// forgets the stream. Destroying a capturing stream is illegal.
func (d *Driver) DestroyStream(h driver.Stream) error {
	s, err := d.openStream(h, "destroy stream")
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return errDestroyed(h, "destroy stream")
	}
	if s.cap != nil {
		err := d.refuseOnCapturing(s, "destroy stream")
		s.mu.Unlock()
		return err
	}
	s.destroyed = true
	s.mu.Unlock()

	d.mu.Lock()
	d.hot[uint64(h)%hotStreams].CompareAndSwap(s, nil) // before the map: no lookup finds it after both
	if m := *d.streams.Load(); m[h] == s {
		m = maps.Clone(m)
		delete(m, h)
		d.streams.Store(&m)
	}
	d.mu.Unlock()
	d.drain(s)
	return nil
}

// StreamSynchronize runs everything queued on s and reports the first
// failure of that work. Illegal on a capturing stream.
func (d *Driver) StreamSynchronize(h driver.Stream) error {
	return d.wait(h, "stream synchronize", driver.Global)
}

// StreamQuery makes the device progress (runs the queue) and then reports
// done. Illegal on a capturing stream.
func (d *Driver) StreamQuery(h driver.Stream) (bool, error) { return d.query(h, driver.Global) }

func (d *Driver) query(h driver.Stream, interaction driver.CaptureMode) (bool, error) {
	if err := d.wait(h, "stream query", interaction); err != nil {
		return false, err
	}
	return true, nil
}

// StreamIdle reports, without running queued work and without waiting,
// whether s has nothing queued and no drain under way (driver.StreamIdler);
// when idle it reports, and clears, the failure of work already run, as a
// synchronize would. Same rules as StreamQuery.
func (d *Driver) StreamIdle(h driver.Stream) (bool, error) {
	s, err := d.lockForQuery(h)
	if s == nil {
		return false, err
	}
	defer s.execMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		return false, nil
	}
	err, s.err = s.err, nil
	return true, err
}

// lockForQuery is s for a question that never waits (StreamIdle,
// StreamPoll), under the same rules as StreamQuery, with its execution
// lock taken for the caller to release. It is nil with the refusal's
// error, or nil and no error while a drain is under way: the stream is
// not idle then.
func (d *Driver) lockForQuery(h driver.Stream) (*stream, error) {
	s, err := d.waitable(h, "stream query", driver.Global)
	if err != nil {
		return nil, err
	}
	if !s.execMu.TryLock() {
		return nil, nil
	}
	return s, nil
}

// copyInteraction is what a blocking copy passes to wait: a synchronous
// pageable cudaMemcpy does not touch another stream's capture when the
// streams are non-blocking (cmd/cudatruth, CUDA 13.0), so only a capture on
// s itself refuses it.
const copyInteraction = driver.Relaxed

// wait drains s on behalf of the host. It is refused while s captures, and,
// for a caller in Global interaction mode, while any Global-mode capture is
// under way on the device: CUDA refuses a synchronize or query of an
// unrelated stream then, and invalidates that capture (cmd/cudatruth,
// CUDA 13.0).
func (d *Driver) wait(h driver.Stream, what string, interaction driver.CaptureMode) error {
	return d.waitThen(h, what, interaction, nil)
}

// waitThen is wait, then then() at the stream's place in its order: the
// stream's execution lock is held from the drain to the end of then, so
// work enqueued meanwhile (by another goroutine) runs after it, never
// during it. A blocking copy is such a then: otherwise a memset enqueued
// and run by another goroutine between the drain and the copy would tear
// the copy. then does not run when queued work failed.
func (d *Driver) waitThen(h driver.Stream, what string, interaction driver.CaptureMode, then func() error) error {
	release, err := d.hold(h, what, interaction)
	if err != nil {
		return err
	}
	defer release()
	if then == nil {
		return nil
	}
	return then()
}

// hold is wait that keeps s at this point of its order: it returns with the
// stream's execution lock held (release gives it back), after everything
// queued before has run, so work enqueued meanwhile runs after release.
// On error (queued work failed included) nothing is held.
func (d *Driver) hold(h driver.Stream, what string, interaction driver.CaptureMode) (release func(), err error) {
	s, err := d.waitable(h, what, interaction)
	if err != nil {
		return nil, err
	}
	s.execMu.Lock()
	d.drainLocked(s)
	if err := s.takeErr(); err != nil {
		s.execMu.Unlock()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(s.execMu.Unlock) }, nil
}

// waitable finds h and checks that the host may wait for it now: refused
// while it captures, and, for a caller in Global interaction mode, while any
// Global-mode capture is under way on the device (see wait).
func (d *Driver) waitable(h driver.Stream, what string, interaction driver.CaptureMode) (*stream, error) {
	s, err := d.openStream(h, what)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return nil, errDestroyed(h, what)
	}
	if s.cap != nil {
		err := d.refuseOnCapturing(s, what)
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	d.mu.Lock()
	if len(d.globalCaps) > 0 { // builds the message only for a refusal
		err = d.refuseUnsafeLocked(what+" of a stream that is not capturing", interaction)
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stream) takeErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.err
	s.err = nil
	return err
}

// submit queues o on s, or records it when s captures. o is copied.
func (d *Driver) submit(s *stream, o *op, what string) error {
	s.mu.Lock()
	full, err := d.submitLocked(s, o, what)
	s.mu.Unlock()
	if full {
		d.drain(s)
	}
	return err
}

// submitLocked is submit with s.mu held; full asks the caller to run the
// queue once the lock is released.
func (d *Driver) submitLocked(s *stream, o *op, what string) (full bool, err error) {
	if s.destroyed {
		return false, errDestroyed(s.h, what)
	}
	if c := s.cap; c != nil {
		return false, d.record(c, o, what)
	}
	if o.pageable {
		// CUDA stages pageable source bytes before returning: the caller may
		// reuse them at once, so take a copy now.
		o.host = bytes.Clone(o.host)
		o.pageable = false
	}
	s.queue = append(s.queue, *o)
	return len(s.queue) >= maxQueue, nil
}

// failed reports err for an operation on s whose arguments were bad; on a
// capturing stream the error also invalidates the capture, as in CUDA.
func (d *Driver) failed(s *stream, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cap; c != nil {
		return d.captureFailed(c, err)
	}
	return err
}

// drain runs the work queued on s so far, in order, in the calling
// goroutine. Failures are kept in s.err for the next wait.
func (d *Driver) drain(s *stream) {
	s.execMu.Lock()
	defer s.execMu.Unlock()
	d.drainLocked(s)
}

// drainLocked is drain with s.execMu held.
func (d *Driver) drainLocked(s *stream) {
	s.mu.Lock()
	q := s.queue
	if len(q) == 0 {
		s.mu.Unlock()
		return
	}
	s.queue, s.spare = s.spare, nil
	s.mu.Unlock()
	d.runBatch(s, q)
}

// runBatch runs q, a batch detached from s's queue, in order, in the
// calling goroutine, with s.execMu held; then it gives q back as the
// spare buffer and keeps the first failure in s.err.
func (d *Driver) runBatch(s *stream, q []op) {
	var first error
	for i := range q {
		if err := d.run(&q[i]); err != nil && first == nil {
			first = err
		}
	}
	clear(q) // drop references to host slices and allocations
	s.mu.Lock()
	if cap(q) <= 2*maxQueue && !s.destroyed {
		s.spare = q[:0]
	}
	if first != nil && s.err == nil {
		s.err = first
	}
	s.mu.Unlock()
}

// drainAll waits until the work queued on every stream so far has run:
// what a device-synchronizing call (cudaFree, cudaFreeHost) waits for. Each
// stream with work runs it in a goroutine of its own, all concurrently, as
// a device runs its streams; never in the caller's goroutine. Drained one
// after another there, one stream's host functions would run in the
// caller while the work they wait for (a peer rank's barrier) stayed
// queued behind them on another stream: two collective ranks on one
// driver would time out.
func (d *Driver) drainAll() {
	var wg sync.WaitGroup
	for _, s := range *d.streams.Load() {
		if s.busy() {
			wg.Go(func() { d.drain(s) })
		}
	}
	wg.Wait()
}

// busy reports whether s has work queued or a drain under way.
func (s *stream) busy() bool {
	if !s.execMu.TryLock() {
		return true
	}
	defer s.execMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue) > 0
}
