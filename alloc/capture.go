package alloc

import (
	"errors"
	"fmt"
	"time"
)

// capture is the allocator's record of a capture it started.
type capture struct {
	mode      CaptureMode
	blocks    []*block // allocated in the capture: owned by the graph
	deferred  []*block // freed in the capture but allocated before it
	lazyWS    []string // workspaces first allocated in the capture
	allocs    int      // allocations made while capturing
	abandoned bool     // the watchdog gave up on WithCapture's function
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
// unsafe calls in flight in the domain to finish (at most the watchdog's
// deadline), so none of them runs into the new capture.
func (a *Allocator) BeginCapture(mode CaptureMode) error {
	if mode < Global || mode > Relaxed {
		return a.fail("BeginCapture", -1, StateNone, wrapf(ErrInvalidValue, "capture mode %d", mode))
	}
	if !a.dom.lockGate(a.watchdog.timeout) {
		return a.fail("BeginCapture", -1, StateNone, wrapf(ErrCaptureTimeout, "an unsafe driver call in the domain did not finish within %v", a.watchdog.timeout))
	}
	defer a.dom.gate.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
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
	if err == nil {
		err = a.drv.BeginCapture(a.stream, mode)
	}
	if err != nil {
		return a.fail("BeginCapture", -1, st, err)
	}
	a.cap = &capture{mode: mode}
	a.dom.add(a.stream, mode)
	return nil
}

// EndCapture ends the capture this allocator started and returns the
// instantiated graph. If the capture was invalidated it returns an error
// wrapping ErrCaptureInvalidated, and everything the capture took is
// released: graph allocations, and deferred frees go back to the pool.
func (a *Allocator) EndCapture() (*Graph, error) {
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
	g, syncFrees, err := a.endCaptureLocked(a.cap)
	a.mu.Unlock()
	a.freeSyncBlocks(syncFrees)
	if err != nil {
		return nil, a.fail("EndCapture", -1, st, err)
	}
	for _, w := range g.warnings {
		a.opts.logger().Warn("capalloc: "+w, "backend", a.backend)
	}
	return g, nil
}

// endCaptureLocked ends c on the driver and builds the graph. It returns the
// AllocSync blocks whose deferred frees must be made once a.mu is released.
func (a *Allocator) endCaptureLocked(c *capture) (*Graph, []*block, error) {
	h, err := a.drv.EndCapture(a.stream)
	a.dom.remove(a.stream)
	a.cap = nil
	a.lastCap = c
	if err != nil {
		a.stats.FailedCapture++
		return nil, a.discardLocked(c, false), err
	}
	autoFree := false
	for _, b := range c.blocks {
		autoFree = autoFree || !b.freedInGraph
	}
	exec, err := a.drv.GraphInstantiate(h, autoFree)
	if err != nil {
		a.stats.FailedCapture++
		err = errors.Join(err, a.drv.GraphDestroy(h))
		return nil, a.discardLocked(c, false), err
	}
	g := &Graph{a: a, h: h, exec: exec, cap: c}
	for _, name := range c.lazyWS {
		g.warnings = append(g.warnings, fmt.Sprintf("workspace %q was first allocated inside the capture; reserve it before capturing", name))
	}
	a.graphs[g] = struct{}{}
	a.stats.Captures++
	return g, nil, nil
}

// discardLocked releases what capture c took. launched says whether a graph
// launch materialized its allocations (then those the graph did not free
// must be freed explicitly; otherwise the driver released them with the
// graph). Deferred pooled frees return to the pool; deferred AllocSync
// blocks are returned for the caller to free without a.mu held.
func (a *Allocator) discardLocked(c *capture, launched bool) (syncFrees []*block) {
	for _, b := range c.blocks {
		if b.live {
			a.retireLocked(b)
		}
		if launched && !b.freedInGraph {
			if err := a.drv.FreeAsync(b.ptr, a.stream); err != nil {
				a.opts.logger().Warn("capalloc: freeing graph allocation", "backend", a.backend, "err", err)
			}
		}
		a.stats.DriverFrees++
		a.stats.BytesReserved -= b.class
		b.cap = nil
	}
	for _, name := range c.lazyWS {
		if ws := a.workspaces[name]; ws != nil && ws.kind == kindGraph && !ws.live {
			delete(a.workspaces, name)
		}
	}
	for _, b := range c.deferred {
		if b.kind == kindSync {
			syncFrees = append(syncFrees, b)
			continue
		}
		a.pool.put(b)
	}
	c.blocks, c.deferred = nil, nil
	return syncFrees
}

// freeSyncBlocks makes the synchronous frees deferred by a capture.
func (a *Allocator) freeSyncBlocks(bs []*block) {
	for _, b := range bs {
		err := a.watchdog.call("Free", func() error {
			a.dom.gate.RLock()
			defer a.dom.gate.RUnlock()
			a.mu.Lock()
			a.stats.DriverFrees++
			a.stats.BytesReserved -= b.class
			a.mu.Unlock()
			return a.drv.Free(b.ptr)
		})
		if err != nil {
			a.opts.logger().Warn("capalloc: deferred free", "backend", a.backend, "err", err)
		}
	}
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
// capture releases everything it took. If fn outlives the deadline, the
// caller gets ErrCaptureTimeout at the deadline; the capture is abandoned
// (operations on the allocator fail with ErrCaptureTimeout) and is ended and
// released when fn finally returns. A panic in fn ends the capture and is
// re-raised in the caller.
func (a *Allocator) WithCapture(opts CaptureOptions, fn func() error) (*Graph, error) {
	if fn == nil {
		return nil, a.fail("WithCapture", -1, StateNone, wrapf(ErrInvalidValue, "nil function"))
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = a.watchdog.timeout
	}
	if err := a.BeginCapture(opts.Mode); err != nil {
		if opts.EagerFallback && errors.Is(err, ErrCaptureUnavailable) {
			if ferr := fn(); ferr != nil {
				return nil, ferr
			}
			return a.eagerGraph(fn), nil
		}
		return nil, err
	}
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
	if timeout > 0 {
		t := time.NewTimer(timeout)
		select {
		case r = <-done:
			t.Stop()
		case <-t.C:
			a.abandon(c, done)
			return nil, a.fail("WithCapture", -1, StateInvalidated, wrapf(ErrCaptureTimeout, "captured function still running after %v; capture abandoned", timeout))
		}
	} else {
		r = <-done
	}

	g, endErr := a.EndCapture()
	switch {
	case r.panic != nil:
		if g != nil {
			_ = g.Close()
		}
		panic(r.panic)
	case r.err != nil:
		if g != nil {
			_ = g.Close()
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
// when its function returns.
func (a *Allocator) abandon(c *capture, done <-chan captureResult) {
	a.watchdog.expired.Add(1)
	a.mu.Lock()
	c.abandoned = true
	a.mu.Unlock()
	go func() {
		<-done
		a.mu.Lock()
		var syncFrees []*block
		if a.cap == c && !a.closed {
			var g *Graph
			g, syncFrees, _ = a.endCaptureLocked(c)
			if g != nil {
				syncFrees = append(syncFrees, a.closeGraphLocked(g)...)
			}
		}
		a.mu.Unlock()
		a.freeSyncBlocks(syncFrees)
	}()
}
