package alloc

import (
	"errors"
	"fmt"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// capture is the allocator's record of a capture it started.
type capture struct {
	mode      CaptureMode
	blocks    []*block // allocated in the capture: owned by the graph
	deferred  []*block // freed in the capture but allocated before it
	refs      []*block // other blocks the captured work uses (block.refs)
	lazyWS    []string // workspaces first allocated in the capture
	allocs    int      // allocations made while capturing
	abandoned bool     // the watchdog gave up on its function or driver call
	err       error    // why it ended without a graph
	// pins counts the blocking calls in flight on its blocks (pinLocked);
	// closedGraph is its graph, closed meanwhile, that the last of them
	// destroys.
	pins        int
	closedGraph *Graph
}

// CaptureStatus reports the stream's capture state, asking the driver.
func (a *Allocator) CaptureStatus() (CaptureState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, err := a.stateLocked()
	if err != nil {
		return st, a.fail("CaptureStatus", -1, st, err)
	}
	return st, nil
}

// IsCapturing reports whether the driver says the stream is capturing (a
// capture of this allocator or anyone's). False on error.
func (a *Allocator) IsCapturing() bool {
	st, err := a.CaptureStatus()
	return err == nil && st != StateNone
}

// CaptureAllocCount is the number of allocations made inside the current
// capture, or inside the last one once it ended. An engine asserts it is
// zero to prove its hot loop allocates nothing.
func (a *Allocator) CaptureAllocCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.cap != nil:
		return a.cap.allocs
	case a.lastCap != nil:
		return a.lastCap.allocs
	}
	return 0
}

// BeginCapture starts capturing the allocator's stream in mode. It waits for
// unsafe calls in flight in the domain to finish, and the driver's capture
// begin to return, each at most the watchdog's deadline, so none of them
// runs into the new capture and a hung driver costs the caller the deadline.
func (a *Allocator) BeginCapture(mode CaptureMode) error {
	if mode < Global || mode > Relaxed {
		return a.fail("BeginCapture", -1, StateNone, wrapf(ErrInvalidValue, "capture mode %d", mode))
	}
	if !a.dom.gate.Lock(a.watchdog.timeout) {
		return a.fail("BeginCapture", -1, StateNone, wrapf(ErrCaptureTimeout, "an unsafe driver call in the domain did not finish within %v", a.watchdog.timeout))
	}
	defer a.dom.gate.Unlock()
	a.mu.Lock()
	st, err := a.stateLocked()
	if err == nil {
		switch st {
		case StateActive:
			err = wrapf(ErrAlreadyCapturing, "a %s-mode capture is active", a.cap.mode)
		case StateExternal:
			err = wrapf(ErrAlreadyCapturing, "a capture this allocator did not start is active on its stream")
		case StateInvalidated:
			err = wrapf(ErrAlreadyCapturing, "an invalidated capture must be ended first")
		}
	}
	if err != nil {
		a.mu.Unlock()
		return a.fail("BeginCapture", -1, st, err)
	}
	c := &capture{mode: mode}
	a.setCapLocked(c)
	done := a.transitionLocked()
	a.mu.Unlock()

	// The driver call holds the gate, not a.mu: operations on this
	// allocator wait for the transition (bounded by the same deadline)
	// instead of behind a lock a hung driver would never release.
	expired, err := a.watchdog.run("BeginCapture", a.watchdog.timeout, func() error {
		return a.drv.BeginCapture(a.stream, mode)
	}, func(err error) { a.beginReturnedLate(c, err) })
	a.mu.Lock()
	defer a.mu.Unlock()
	defer done()
	switch {
	case expired:
		// The driver may yet begin the capture: count it as a Global one
		// in the domain until it returns, so no unsafe call runs into it.
		c.abandoned = true
		a.dom.add(a.stream, Global)
		return a.fail("BeginCapture", -1, st, err)
	case err != nil:
		a.setCapLocked(nil)
		return a.fail("BeginCapture", -1, st, err)
	}
	a.dom.add(a.stream, mode)
	return nil
}

// beginReturnedLate cleans up after a driver capture begin that returned
// after the watchdog gave up on it: a capture it began is ended and its
// graph destroyed, and the domain forgets the stream.
func (a *Allocator) beginReturnedLate(c *capture, err error) {
	if err == nil {
		if h, eerr := a.drv.EndCapture(a.stream); eerr == nil {
			_ = a.drv.GraphDestroy(h)
		}
	}
	a.mu.Lock()
	if a.cap == c {
		a.setCapLocked(nil)
	}
	a.dom.remove(a.stream)
	a.mu.Unlock()
	a.finishClose(a.cleanupLate)
}

// EndCapture ends the capture this allocator started and returns the
// instantiated graph. If the capture was invalidated it returns an error
// wrapping ErrCaptureInvalidated, and everything the capture took is
// released: graph allocations, and deferred frees go back to the pool. The
// driver's capture end is bounded by the watchdog.
func (a *Allocator) EndCapture() (*Graph, error) {
	return a.endCapture(a.watchdog.timeout)
}

// endCapture is EndCapture with the driver call bounded by timeout.
func (a *Allocator) endCapture(timeout time.Duration) (*Graph, error) {
	a.mu.Lock()
	st, err := a.stateLocked()
	if err == nil && a.cap == nil {
		err = wrapf(ErrNotCapturing, "EndCapture without BeginCapture")
		if st == StateExternal {
			err = wrapf(ErrNotCapturing, "the capture on this stream was not started by this allocator")
		}
	}
	if err != nil {
		a.mu.Unlock()
		return nil, a.fail("EndCapture", -1, st, err)
	}
	g, err := a.endLocked(a.cap, timeout)
	a.mu.Unlock()
	a.flushReleases()
	if err != nil {
		return nil, a.fail("EndCapture", -1, st, err)
	}
	for _, w := range g.warnings {
		a.opts.logger().Warn("capalloc: "+w, "backend", a.backend)
	}
	return g, nil
}

// endLocked ends capture c on the driver, with a.mu released for the
// driver call, and builds the graph. Past timeout the caller gets
// ErrCaptureTimeout, the capture stays abandoned (operations on the
// allocator say so) and is finished, its graph discarded, when the driver
// returns. Caller holds a.mu; releases wait for flushReleases.
func (a *Allocator) endLocked(c *capture, timeout time.Duration) (*Graph, error) {
	done := a.transitionLocked()
	defer done()
	var h driver.GraphHandle
	a.mu.Unlock()
	expired, err := a.watchdog.run("EndCapture", timeout, func() (err error) {
		h, err = a.drv.EndCapture(a.stream)
		return err
	}, func(err error) {
		a.mu.Lock()
		if g := a.finishCaptureLocked(c, h, err); g != nil {
			a.closeGraphLocked(g)
		}
		a.mu.Unlock()
		a.flushReleasesWith(a.cleanupLate)
		a.finishClose(a.cleanupLate)
	})
	a.mu.Lock()
	if expired {
		c.abandoned = true
		return nil, err
	}
	g := a.finishCaptureLocked(c, h, err)
	if g == nil {
		return nil, c.err
	}
	return g, nil
}

// finishCaptureLocked records the end of capture c, whose driver end
// returned h and err, and instantiates its graph. On failure it returns nil,
// leaves the error in c.err and releases what the capture took.
func (a *Allocator) finishCaptureLocked(c *capture, h driver.GraphHandle, err error) *Graph {
	a.dom.remove(a.stream)
	if a.cap == c {
		a.setCapLocked(nil)
	}
	a.lastCap = c
	var exec driver.GraphExec
	if err == nil {
		autoFree := false
		for _, b := range c.blocks {
			autoFree = autoFree || !b.freedInGraph
		}
		if err = a.strictRelaxedLocked("graph instantiation"); err != nil {
			err = errors.Join(err, a.drv.GraphDestroy(h))
		} else if exec, err = a.drv.GraphInstantiate(h, autoFree); err != nil {
			err = errors.Join(err, a.drv.GraphDestroy(h))
		}
	}
	if err != nil {
		c.err = err
		a.stats.FailedCapture++
		a.discardLocked(c, false)
		return nil
	}
	g := &Graph{a: a, h: h, exec: exec, cap: c}
	for _, name := range c.lazyWS {
		g.warnings = append(g.warnings, fmt.Sprintf("workspace %q was first allocated inside the capture; reserve it before capturing", name))
	}
	a.graphs[g] = struct{}{}
	a.stats.Captures++
	return g
}

// setCapLocked records the capture this allocator began (nil: none). The
// lock-free lane is closed while there is one (shard.go): in a capture
// every allocation and free is the locked path's. Caller holds a.mu.
func (a *Allocator) setCapLocked(c *capture) {
	switch {
	case a.cap == nil && c != nil:
		a.closeLaneLocked()
	case a.cap != nil && c == nil:
		a.openLaneLocked()
	}
	a.cap = c
}

// transitionLocked marks a capture begin or end in flight: operations on
// the allocator wait in stateLocked until the returned func, called with
// a.mu held, ends it. Caller holds a.mu.
func (a *Allocator) transitionLocked() (done func()) {
	ch := make(chan struct{})
	a.transition = ch
	return func() {
		if a.transition == ch {
			a.transition = nil
		}
		close(ch)
	}
}

// discardLocked releases what capture c took. launched says whether a graph
// launch materialized its allocations (then those the graph did not free
// must be freed explicitly; otherwise the driver released them with the
// graph). Deferred frees are released (pooled ones to the pool, AllocSync
// ones queued for flushReleases), and the references c held on buffers from
// before it are dropped.
func (a *Allocator) discardLocked(c *capture, launched bool) {
	for _, b := range c.blocks {
		if b.live() {
			a.retireLocked(b)
		}
		b.materialized = launched && !b.freedInGraph
		a.releaseLocked(b)
	}
	for _, name := range c.lazyWS {
		if ws := a.workspaces[name]; ws != nil && ws.kind == kindGraph && !ws.live() {
			delete(a.workspaces, name)
		}
	}
	for _, b := range c.deferred {
		a.releaseLocked(b)
	}
	for _, b := range c.refs {
		a.unrefLocked(b)
	}
	c.blocks, c.deferred, c.refs = nil, nil, nil
}

// CaptureOptions configures WithCapture.
type CaptureOptions struct {
	Mode CaptureMode
	// Timeout bounds fn; zero means the allocator's watchdog deadline,
	// negative means no bound.
	Timeout time.Duration
	// EagerFallback: when the driver cannot capture (ErrCaptureUnavailable),
	// run fn eagerly instead and return a Graph whose Launch runs fn again.
	EagerFallback bool
}

// WithCapture captures what fn enqueues on the allocator and returns the
// graph. An error from fn wins over the EndCapture error, and a failed
// capture releases everything it took (and counts as a failed capture). If
// fn and the capture end outlive the deadline, the caller gets
// ErrCaptureTimeout at the deadline; the capture is abandoned (operations
// on the allocator fail with ErrCaptureTimeout) and is ended and released
// when fn finally returns. A panic in fn ends the capture and is re-raised
// in the caller.
func (a *Allocator) WithCapture(opts CaptureOptions, fn func() error) (*Graph, error) {
	if fn == nil {
		return nil, a.fail("WithCapture", -1, StateNone, wrapf(ErrInvalidValue, "nil function"))
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = a.watchdog.timeout
	}
	if err := a.BeginCapture(opts.Mode); err != nil {
		if opts.EagerFallback && errors.Is(err, driver.ErrCaptureUnavailable) {
			return a.eagerGraph(fn)
		}
		return nil, err
	}
	start := time.Now()
	a.mu.Lock()
	c := a.cap
	a.mu.Unlock()

	done := make(chan captureResult, 1)
	go func() {
		var r captureResult
		defer func() {
			if p := recover(); p != nil {
				r.panic = p
			}
			done <- r
		}()
		r.err = fn()
	}()
	var r captureResult
	endTimeout := a.watchdog.timeout // no bound on fn: the watchdog's on the end
	if timeout > 0 {
		t := time.NewTimer(timeout)
		select {
		case r = <-done:
			t.Stop()
		case <-t.C:
			a.abandon(c, done)
			return nil, a.fail("WithCapture", -1, StateInvalidated, wrapf(ErrCaptureTimeout, "captured function still running after %v; capture abandoned", timeout))
		}
		// The capture end gets what is left of the deadline (a
		// millisecond at least, so a fast end is never refused).
		endTimeout = max(timeout-time.Since(start), time.Millisecond)
	} else {
		r = <-done
	}

	g, endErr := a.endCapture(endTimeout)
	if r.panic != nil || r.err != nil {
		if g != nil {
			a.mu.Lock()
			a.stats.Captures--
			a.stats.FailedCapture++
			a.mu.Unlock()
			_ = g.Close()
		}
		if r.panic != nil {
			panic(r.panic)
		}
		if endErr != nil {
			return nil, fmt.Errorf("%w (and ending the capture: %v)", r.err, endErr)
		}
		return nil, r.err
	}
	return g, endErr
}

// captureResult is how WithCapture's function ends.
type captureResult struct {
	err   error
	panic any
}

// abandon marks c abandoned and arranges for it to be ended and released
// when its function returns, whether or not the allocator was closed
// meanwhile (Close leaves an abandoned capture, and its own teardown, to
// this): the driver's capture end (on the thread that began it, the
// driver's business), its graph discarded, the domain told, then Close's
// teardown if it waits.
func (a *Allocator) abandon(c *capture, done <-chan captureResult) {
	a.watchdog.expired.Add(1)
	a.mu.Lock()
	c.abandoned = true
	a.mu.Unlock()
	go func() {
		<-done
		a.mu.Lock()
		if a.cap == c {
			if g, _ := a.endLocked(c, a.watchdog.timeout); g != nil {
				a.stats.Captures--
				a.stats.FailedCapture++
				a.closeGraphLocked(g)
			}
		}
		a.mu.Unlock()
		a.flushReleases()
		a.finishClose(a.cleanup)
	}()
}
