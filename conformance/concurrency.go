package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

const (
	workers    = 8
	iterations = 500
)

// stamp fills b with a pattern unique to (worker, iteration), so data that
// crossed between goroutines or iterations is caught.
func stamp(b []byte, worker, iter int) {
	for k := range b {
		b[k] = byte(worker*31 + iter*7 + k)
	}
}

// parallel runs fn(w) on n goroutines and returns their errors joined.
func parallel(n int, fn func(w int) error) error { return errors.Join(parallelEach(n, fn)...) }

// loopUntilStopped runs body over and over on n goroutines (i counts a
// goroutine's rounds) until body returns false or stop is called; stop
// waits for them to end, and the test's cleanup calls it if the test has
// not, so a failed test leaves nothing running.
func loopUntilStopped(t *testing.T, n int, body func(i int) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if !body(i) {
					return
				}
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
	t.Cleanup(stop)
	return stop
}

// pageableWorker round-trips buffers through pageable copies.
func pageableWorker(a *alloc.Allocator, w, iters int) error {
	for i := range iters {
		n := int64(64 + (w*37+i*13)%4000)
		b, err := a.Alloc(n)
		if err != nil {
			return err
		}
		want := make([]byte, n)
		stamp(want, w, i)
		if err := a.Upload(b, 0, want); err != nil {
			return err
		}
		got := make([]byte, n)
		if err := a.Download(got, b, 0); err != nil {
			return err
		}
		if err := diffBytes(got, want); err != nil {
			return fmt.Errorf("worker %d iteration %d: data corrupted: %w", w, i, err)
		}
		if err := a.Free(b); err != nil {
			return err
		}
	}
	return nil
}

// pinnedWorker round-trips buffers through pinned stream-ordered copies.
func pinnedWorker(a *alloc.Allocator, w, iters int) (err error) {
	const maxN = 4096
	in, err := a.HostAlloc(maxN)
	if err != nil {
		return err
	}
	out, err := a.HostAlloc(maxN)
	if err != nil {
		return errors.Join(err, in.Close())
	}
	defer func() { err = errors.Join(err, in.Close(), out.Close()) }()
	for i := range iters {
		n := int64(64 + (w*53+i*11)%(maxN-64))
		b, err := a.Alloc(n)
		if err != nil {
			return err
		}
		stamp(in.Bytes()[:n], w, i)
		fill(out.Bytes()[:n], 0)
		if err := errors.Join(a.UploadHost(b, 0, in, 0, n), a.DownloadHost(out, 0, b, 0, n)); err != nil {
			return err
		}
		if err := a.Synchronize(); err != nil {
			return err
		}
		if err := diffBytes(out.Bytes()[:n], in.Bytes()[:n]); err != nil {
			return fmt.Errorf("worker %d iteration %d: data corrupted: %w", w, i, err)
		}
		if err := a.Free(b); err != nil {
			return err
		}
	}
	return nil
}

// concurrency: allocators shared by goroutines, several allocators on one
// driver, and captures beside eager work keep every goroutine's data its
// own and every capture valid.
func (s *suite) concurrency(t *testing.T) {
	runRules(t,
		rule{"one_allocator_pageable", s.oneAllocatorPageableRoundTrips},
		rule{"one_allocator_pinned", s.oneAllocatorPinnedRoundTrips},
		rule{"blocking_copy_in_stream_order", s.blockingCopyRunsInStreamOrder},
		rule{"many_allocators_one_driver", s.manyAllocatorsShareOneDriver},
		rule{"parallel_captures_fresh_data", s.parallelCapturesReplayFreshData},
		rule{"global_capture_vs_unsafe_calls", s.globalCaptureSurvivesUnsafeCalls},
	)
}

func (s *suite) oneAllocatorPageableRoundTrips(t *testing.T) {
	e := s.env(t)
	require.NoError(t, parallel(workers, func(w int) error { return pageableWorker(e.a, w, iterations) }))
	assert.Zero(t, e.a.Stats().LiveBuffers)
	assert.Zero(t, e.a.Stats().BytesInUse)
}

func (s *suite) oneAllocatorPinnedRoundTrips(t *testing.T) {
	e := s.env(t)
	require.NoError(t, parallel(workers, func(w int) error { return pinnedWorker(e.a, w, iterations) }))
	assert.Zero(t, e.a.Stats().LiveBuffers)
	assert.Zero(t, e.a.Stats().HostBuffers)
}

// blockingCopyRunsInStreamOrder: a blocking copy runs at its place in the
// stream's order: while one goroutine enqueues memsets (and makes them
// run) another's pageable download never sees a half-written buffer.
// Large enough that a copy outlasts a round trip to a plugin.
func (s *suite) blockingCopyRunsInStreamOrder(t *testing.T) {
	e := s.env(t)
	const n = 8 << 20
	b := mustAlloc(t, e.a, n)
	upload(t, e.a, b, 0, repeat(1, n))
	stop := loopUntilStopped(t, 1, func(i int) bool {
		if err := e.a.Memset(b, 0, byte(1+i%2), n); err != nil {
			return assert.NoError(t, err)
		}
		_, err := e.a.Query()
		return assert.NoError(t, err)
	})
	dst := make([]byte, n)
	up := repeat(7, n)
	torn, reads := 0, 0
	for i := range 90 {
		if i%3 == 0 {
			require.NoError(t, e.a.Upload(b, 0, up))
			continue
		}
		require.NoError(t, e.a.Download(dst, b, 0))
		reads++
		if c := bytes.Count(dst, dst[:1]); c != n {
			torn++
		}
	}
	stop()
	require.Zero(t, torn, "%d of %d downloads were torn: a blocking copy ran concurrently with later work", torn, reads)
	require.NoError(t, e.a.Free(b))
}

// fourAllocators is e's allocator and three more on its driver.
func fourAllocators(e *env) []*alloc.Allocator {
	as := []*alloc.Allocator{e.a}
	for range 3 {
		as = append(as, e.newAllocator(alloc.Options{}))
	}
	return as
}

func (s *suite) manyAllocatorsShareOneDriver(t *testing.T) {
	e := s.env(t)
	as := fourAllocators(e)
	require.NoError(t, parallel(2*len(as), func(w int) error {
		a := as[w%len(as)]
		if w%2 == 0 {
			return pageableWorker(a, w, iterations/4)
		}
		return pinnedWorker(a, w, iterations/4)
	}))
	for _, a := range as {
		assert.Zero(t, a.Stats().LiveBuffers)
	}
}

// parallelCapturesReplayFreshData: ThreadLocal captures on different
// streams do not disturb each other or each other's eager work.
func (s *suite) parallelCapturesReplayFreshData(t *testing.T) {
	e := s.env(t)
	as := fourAllocators(e)
	progs := make([]*program, len(as))
	for i, a := range as {
		progs[i] = newProgram(t, a, 4096)
	}
	// Strict capture safety (docs/capture-safety.md) refuses a graph's
	// instantiation while another capture is active: that capture
	// yields no graph, cleanly, and is tried again.
	strict := strictSafety(e.a)
	require.NoError(t, parallel(len(as), func(w int) error {
		p := progs[w]
		g, err := p.a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, p.enqueue)
		for try := 0; strict && errors.Is(err, driver.ErrCaptureIllegalOp) && try < 10000; try++ {
			runtime.Gosched()
			g, err = p.a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, p.enqueue)
		}
		if err != nil {
			return err
		}
		return errors.Join(checkFreshReplays(p, g, 20, uint64(100*w)), g.Close())
	}))
	for _, p := range progs {
		p.close(t)
	}
}

// unsafeCaller makes unsafe calls on b until stopped: each either runs or
// is refused with a typed error. AllocSync buffers whose free was refused
// are kept in pending, to be freed once it stopped.
type unsafeCaller struct {
	b            *alloc.Allocator
	buf          alloc.Buffer
	stop         atomic.Bool
	ran, refused atomic.Int64
	pending      []alloc.Buffer
	errc         chan error
}

func (u *unsafeCaller) run() {
	var err error
	for i := 0; !u.stop.Load() && err == nil; i++ {
		switch i % 3 {
		case 0:
			var x alloc.Buffer
			if x, err = u.b.AllocSync(1000); err == nil {
				// cudaFree is unsafe too: refused, it is retried later.
				if err = u.b.Free(x); err != nil {
					u.pending = append(u.pending, x)
				}
			}
		case 1:
			err = u.b.Upload(u.buf, 0, []byte{byte(i)})
		case 2:
			err = u.b.Synchronize()
		}
		switch {
		case err == nil:
			u.ran.Add(1)
		case errors.Is(err, alloc.ErrCaptureIncompatibleAllocation), errors.Is(err, alloc.ErrSyncDuringCapture):
			u.refused.Add(1)
			err = nil
		}
		time.Sleep(10 * time.Microsecond)
	}
	u.errc <- err
}

// globalCaptureSurvivesUnsafeCalls: one allocator captures in Global mode
// over and over while another makes unsafe calls: each call either runs
// or is refused with a typed error, and none ever lands inside a capture
// (the driver would refuse it and invalidate the capture).
func (s *suite) globalCaptureSurvivesUnsafeCalls(t *testing.T) {
	e := s.env(t)
	b := e.newAllocator(alloc.Options{})
	u := &unsafeCaller{b: b, buf: mustAlloc(t, b, 4096), errc: make(chan error, 1)}
	// Slow device-wide calls: one that slipped past the guard just
	// before a capture began would still be in the driver inside it.
	e.spy.Delay(alloctest.MethodMalloc, 100*time.Microsecond)
	e.spy.Delay(alloctest.MethodFree, 100*time.Microsecond)
	defer u.stop.Store(true)
	go u.run()
	var slowest time.Duration
	deadline := time.Now().Add(10 * time.Second)
	i := 0
	for ; (i < 100 || u.ran.Load() < 100) && time.Now().Before(deadline); i++ {
		start := time.Now()
		require.NoError(t, e.a.BeginCapture(alloc.Global))
		slowest = max(slowest, time.Since(start))
		x, err := e.a.Alloc(1000)
		require.NoError(t, err)
		time.Sleep(30 * time.Microsecond)
		require.NoError(t, e.a.Free(x))
		g, err := e.a.EndCapture()
		require.NoError(t, err, "capture %d was invalidated by a concurrent unsafe call", i)
		require.NoError(t, g.Close())
		time.Sleep(30 * time.Microsecond) // a window for B's calls to start
	}
	u.stop.Store(true)
	require.NoError(t, <-u.errc)
	t.Logf("%d captures (slowest begin %v); B's unsafe calls: %d ran, %d refused", i, slowest, u.ran.Load(), u.refused.Load())
	require.Positive(t, u.ran.Load(), "B never got a call through: the test proved nothing")
	freeAll(t, b, u.pending)
	require.NoError(t, b.Free(u.buf))
}
