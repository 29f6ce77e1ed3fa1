package alloc

import (
	"errors"
	"fmt"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// capture is the allocator's record of a capture it started, and its
// lifecycle: begun by BeginCapture (begin), ended by EndCapture or
// WithCapture (endLocked, finishLocked; capture_end.go), released when it
// fails or its graph is destroyed (discardLocked), abandoned when the
// watchdog gives up on it (withcapture.go).
type capture struct {
	a         *Allocator
	id        int    // its graph's Graph.ID, given at begin (nextGraphID)
	name      string // CaptureOptions.Name
	mode      CaptureMode
	blocks    []*block    // allocated in the capture: owned by the graph
	deferred  []*block    // freed in the capture but allocated before it
	refs      []*block    // other blocks the captured work uses (block.refs)
	hostRefs  []*hostSlot // cached host memory it took or its copies use (hostcache.go)
	lazyWS    []string    // workspaces first allocated in the capture
	allocs    int         // allocations made while capturing
	abandoned bool        // the watchdog gave up on its function or driver call
	err       error       // why it ended without a graph
	// pins counts the blocking calls in flight on its blocks (pinLocked);
	// closedGraph is its graph, closed meanwhile, that the last of them
	// destroys.
	pins        int
	closedGraph *Graph
	// pool is the graph pool it captures into (CaptureOptions.Pool), nil
	// for none; pooled, the pool's blocks it holds; poolMiss, the bytes
	// the pool could not serve (graphpool_capture.go).
	pool     *GraphPool
	pooled   []*block
	poolMiss int64
	leftPool bool // its membership of pool ended (discardPooledLocked)
}

// CaptureStatus reports the stream's capture state, asking the driver.
func (a *Allocator) CaptureStatus() (CaptureState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, err := a.guard.stateLocked()
	if err != nil {
		return st, a.fail("CaptureStatus", -1, st, err)
	}
	return st, nil
}

// IsCapturing reports whether the driver says the stream is capturing (a
// capture of this allocator or anyone's). When the status cannot be read
// (a closed allocator, a driver error, a capture the watchdog abandoned)
// it returns false and CaptureStatus's error.
func (a *Allocator) IsCapturing() (bool, error) {
	st, err := a.CaptureStatus()
	if err != nil {
		return false, err
	}
	return st != StateNone, nil
}

// CaptureAllocCount is the number of allocations made inside the current
// capture, or inside the last one once it ended. An engine asserts it is
// zero to prove its hot loop allocates nothing.
func (a *Allocator) CaptureAllocCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.guard.cap; c != nil {
		return c.allocs
	}
	if c := a.guard.lastCap; c != nil {
		return c.allocs
	}
	return 0
}

// BeginCapture starts capturing the allocator's stream in mode. It waits for
// unsafe calls in flight in the domain to finish, and the driver's capture
// begin to return, each at most the watchdog's deadline, so none of them
// runs into the new capture and a hung driver costs the caller the deadline.
func (a *Allocator) BeginCapture(mode CaptureMode) error {
	_, err := beginCapture(a, mode, nil, "")
	return err
}

// beginCapture is BeginCapture into graph pool gp (nil: none) of a
// capture named name, returning the capture it began.
func beginCapture(a *Allocator, mode CaptureMode, gp *GraphPool, name string) (*capture, error) {
	if mode < Global || mode > Relaxed {
		return nil, a.fail("BeginCapture", -1, StateNone, wrapf(ErrInvalidValue, "capture mode %d", mode))
	}
	c := &capture{a: a, id: nextGraphID(), name: name, mode: mode, pool: gp}
	if err := c.begin(); err != nil {
		return nil, err
	}
	return c, nil
}

// begin begins c on the driver, behind the gate and the watchdog.
func (c *capture) begin() error {
	a := c.a
	g := &a.guard
	if !g.dom.gate.Lock(g.watchdog.timeout) {
		return g.fail("BeginCapture", -1, StateNone, wrapf(ErrCaptureTimeout, "an unsafe driver call in the domain did not finish within %v", g.watchdog.timeout))
	}
	defer g.dom.gate.Unlock()
	a.mu.Lock()
	st, err := g.stateLocked()
	if err == nil {
		switch st {
		case StateActive:
			err = wrapf(ErrAlreadyCapturing, "a %s-mode capture is active", g.cap.mode)
		case StateExternal:
			err = wrapf(ErrAlreadyCapturing, "a capture this allocator did not start is active on its stream")
		case StateInvalidated:
			err = wrapf(ErrAlreadyCapturing, "an invalidated capture must be ended first")
		}
	}
	if err == nil && c.pool != nil {
		err = c.pool.joinLocked(a)
	}
	if err != nil {
		a.mu.Unlock()
		return g.fail("BeginCapture", -1, st, err)
	}
	g.setCapLocked(c, &a.lane)
	done := g.transitionLocked()
	a.mu.Unlock()

	// The driver call holds the gate, not a.mu: operations on this
	// allocator wait for the transition (bounded by the same deadline)
	// instead of behind a lock a hung driver would never release.
	expired, err := g.watchdog.run("BeginCapture", g.watchdog.timeout, func() error {
		return g.drv.BeginCapture(g.stream, c.mode)
	}, c.beginReturnedLate)
	a.mu.Lock()
	defer a.mu.Unlock()
	defer done()
	switch {
	case expired:
		// The driver may yet begin the capture: count it as a Global one
		// in the domain until it returns, so no unsafe call runs into it.
		c.abandoned = true
		g.dom.add(g.stream, Global)
		return g.fail("BeginCapture", -1, st, err)
	case err != nil:
		g.setCapLocked(nil, &a.lane)
		c.discardPooledLocked(a)
		return g.fail("BeginCapture", -1, st, err)
	}
	g.dom.add(g.stream, c.mode)
	if h := a.stats.hist; h != nil {
		h.record(evCaptureBegin, driver.DevicePtr(c.pool.idOrZero()), 0, graphTag(c.id), c.mode.String())
	}
	return nil
}

// beginReturnedLate cleans up after a driver capture begin that returned
// after the watchdog gave up on it: a capture it began is ended and its
// graph destroyed, and the domain forgets the stream.
func (c *capture) beginReturnedLate(err error) {
	a := c.a
	g := &a.guard
	if err == nil {
		if h, eerr := g.drv.EndCapture(g.stream); eerr == nil {
			_ = g.drv.GraphDestroy(h)
		}
	}
	a.mu.Lock()
	if g.cap == c {
		g.setCapLocked(nil, &a.lane)
	}
	c.discardPooledLocked(a)
	g.dom.remove(g.stream)
	a.mu.Unlock()
	a.finishClose(a.releases.cleanupLate)
}

// EndCapture ends the capture this allocator started and returns the
// instantiated graph. If the capture was invalidated it returns an error
// wrapping ErrCaptureInvalidated, and everything the capture took is
// released: graph allocations, and deferred frees go back to the pool. The
// driver's capture end is bounded by the watchdog.
func (a *Allocator) EndCapture() (*Graph, error) {
	return endCapture(a, a.guard.watchdog.timeout)
}

// endCapture is EndCapture with the driver call bounded by timeout.
func endCapture(a *Allocator, timeout time.Duration) (*Graph, error) {
	a.mu.Lock()
	st, err := a.guard.stateLocked()
	c := a.guard.cap
	if err == nil && c == nil {
		err = wrapf(ErrNotCapturing, "EndCapture without BeginCapture")
		if st == StateExternal {
			err = wrapf(ErrNotCapturing, "the capture on this stream was not started by this allocator")
		}
	}
	if err != nil {
		a.mu.Unlock()
		return nil, a.fail("EndCapture", -1, st, err)
	}
	g, err := c.endLocked(timeout)
	if a.gcAt != 0 && a.guard.cap == nil { // a release the capture deferred (gc.go)
		collectLocked(a, "EndCapture")
	}
	a.mu.Unlock()
	a.releases.flush()
	if err != nil {
		return nil, a.fail("EndCapture", -1, st, err)
	}
	for _, w := range g.warnings {
		a.opts.logger().Warn("capalloc: "+w, "backend", a.backend)
	}
	return g, nil
}

// allocLocked makes an allocation node of a's in c, a's active capture:
// the memory is the graph's until Graph.Close. Caller holds a.mu.
func (c *capture) allocLocked(a *Allocator, op string, size int64) (Buffer, error) {
	if err := a.stats.limit.take(size); err != nil {
		return Buffer{}, outOfMemory(a, size, "", err)
	}
	p, err := a.drv.MallocAsync(size, a.stream)
	if err != nil {
		a.stats.limit.put(size)
	}
	if errors.Is(err, ErrOutOfMemory) {
		return Buffer{}, outOfMemory(a, size, "", err)
	}
	if err != nil {
		return Buffer{}, refusedInCapture(a.drv, a.stream, err)
	}
	if err := afterCaptured(a.drv, a.stream, op); err != nil {
		a.stats.limit.put(size)
		return Buffer{}, err // the driver releases memory of an invalidated capture
	}
	b := &block{a: a, ptr: p, class: size, kind: kindGraph, cap: c}
	c.blocks = append(c.blocks, b)
	c.allocs++
	a.stats.CaptureAllocs++
	a.stats.DriverAllocs++
	a.stats.addReserved(p, size)
	return a.handOutLocked(b, size, 0), nil
}

// afterCaptured re-reads the driver's capture status of stream s after a
// call was recorded: a driver that invalidated the capture while
// reporting success is reported, not trusted.
func afterCaptured(drv driver.Driver, s driver.Stream, op string) error {
	st, err := drv.StreamCaptureStatus(s)
	if err != nil {
		return err
	}
	if st != driver.CaptureActive {
		return wrapf(ErrCaptureInvalidated, "driver invalidated the capture during %s", op)
	}
	return nil
}

// refusedInCapture completes the error of a call the driver refused
// while this allocator's capture records on stream s. A refusal because of the capture
// (ErrCaptureIllegalOp: CUDA's 900, 906, 907) does not always invalidate
// it, so the driver's status is read again and the error says which: it
// also wraps ErrCaptureInvalidated when the capture is gone, and says the
// capture is still active otherwise (EndCapture will then succeed).
func refusedInCapture(drv driver.Driver, s driver.Stream, err error) error {
	if !errors.Is(err, driver.ErrCaptureIllegalOp) || errors.Is(err, ErrCaptureInvalidated) {
		return err
	}
	st, serr := drv.StreamCaptureStatus(s)
	switch {
	case serr != nil:
		return errors.Join(err, serr)
	case st == driver.CaptureActive:
		return fmt.Errorf("%w (the capture is still active)", err)
	}
	return fmt.Errorf("%w (%w by the refusal)", err, ErrCaptureInvalidated)
}
