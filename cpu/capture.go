package cpu

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

type captureState uint8

const (
	captureActive captureState = iota
	captureInvalidated
)

// capture is a stream capture in progress. All fields but s and mode are
// guarded by Driver.mu, so a device-wide call on another goroutine can
// invalidate it without touching the stream's lock.
type capture struct {
	s      *stream
	mode   driver.CaptureMode
	state  captureState
	reason error // what invalidated it
	ops    opChunks
	allocs []*allocation // made during the capture, released if it fails
}

// invalidateLocked moves c to the invalidated state, keeping the first
// reason. d.mu held.
func (c *capture) invalidateLocked(reason error) {
	if c.state == captureActive {
		c.state = captureInvalidated
		c.reason = reason
	}
}

// invalidatedErr is what any further operation on an invalidated capture
// gets. d.mu held.
func (c *capture) invalidatedErr(what string) error {
	return fmt.Errorf("%w: cpu: %s on stream %#x: %s-mode capture was invalidated by: %v",
		driver.ErrCaptureInvalidated, what, uint64(c.s.h), c.mode, c.reason)
}

// captureFailed reports err for an operation on c's stream: like CUDA, a
// failing call invalidates the capture. An already invalidated capture
// reports that too. Stream lock held, d.mu not.
func (d *Driver) captureFailed(c *capture, err error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.state != captureActive {
		return fmt.Errorf("%w (%w)", err, c.invalidatedErr("operation"))
	}
	c.invalidateLocked(err)
	return err
}

// refuseOnCapturing refuses a call that would synchronize s while it
// captures, and invalidates the capture. Stream lock held, d.mu not.
func (d *Driver) refuseOnCapturing(s *stream, what string) error {
	err := errf(driver.ErrCaptureIllegalOp, "%s on capturing stream %#x", what, uint64(s.h))
	return d.captureFailed(s.cap, err)
}

// refuseUnsafeLocked refuses a potentially unsafe device-wide call, made by
// a caller in the given interaction mode, while a Global-mode capture is
// under way on this device, and invalidates every such capture (CUDA's rule
// for a thread in Global mode, the default). Callers in ThreadLocal or
// Relaxed mode, and ThreadLocal or Relaxed captures, are unaffected: the
// emulation cannot tell threads apart. d.mu held.
func (d *Driver) refuseUnsafeLocked(what string, interaction driver.CaptureMode) error {
	if interaction != driver.Global || len(d.globalCaps) == 0 {
		return nil
	}
	err := errf(driver.ErrCaptureIllegalOp, "%s while %d global-mode stream capture(s) are under way on %s",
		what, len(d.globalCaps), d.domain)
	for c := range d.globalCaps {
		c.invalidateLocked(err)
	}
	return err
}

// hangLocked is the GB10 profile's failure for a synchronous allocation
// or free, or a host allocation or free, made while any capture (any mode)
// is active on the device: the real driver hangs in it (zerfoo/ztensor
// ADR 004), the emulation fails it without touching the captures. d.mu
// held.
func (d *Driver) hangLocked(what string) error {
	if !d.gb10 || len(d.allCaps) == 0 {
		return nil
	}
	return errf(driver.ErrCaptureIllegalOp, "%s while %d stream capture(s) are under way on %s: this call hangs a GB10 driver (profile gb10)",
		what, len(d.allCaps), d.domain)
}

// record appends o to c, or says why it cannot. Stream lock held.
func (d *Driver) record(c *capture, o *op, what string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.state != captureActive {
		return c.invalidatedErr(what)
	}
	if o.pageable {
		err := errf(driver.ErrCaptureIllegalOp, "%s on capturing stream %#x: host memory is pageable, not from HostAlloc",
			what, uint64(c.s.h))
		c.invalidateLocked(err)
		return err
	}
	for _, r := range [2]*allocation{o.dst, o.src} {
		if r != nil && r.freedIn == c {
			err := errf(driver.ErrInvalidValue, "%s on capturing stream %#x: allocation %#x was freed earlier in this capture",
				what, uint64(c.s.h), uint64(r.base()))
			c.invalidateLocked(err)
			return err
		}
	}
	c.ops.add(o)
	return nil
}

// opChunks records a capture's operations in fixed-size chunks: appending
// never copies what was recorded, and no allocation grows with the
// capture, so recording costs the same per operation at 1e3 or 1e5
// operations. The graph keeps the chunks as they are: no copy
// into one slice at the end either.
type opChunks [][]op

const opChunk = 1024

func (c *opChunks) add(o *op) {
	if len(*c) == 0 || len((*c)[len(*c)-1]) == opChunk {
		*c = append(*c, make([]op, 0, opChunk))
	}
	last := &(*c)[len(*c)-1]
	*last = append(*last, *o)
}

// BeginCapture starts recording the work submitted to s.
func (d *Driver) BeginCapture(h driver.Stream, mode driver.CaptureMode) error {
	const what = "begin capture"
	if d.closed.Load() {
		return errClosed(what)
	}
	if d.noCapture {
		return errf(driver.ErrCaptureUnavailable, "%s: this emulated device has no graph support (Options.NoCapture)", what)
	}
	s, err := d.stream(h, what)
	if err != nil {
		return err
	}
	switch mode {
	case driver.Global, driver.ThreadLocal, driver.Relaxed:
	default:
		return errf(driver.ErrInvalidValue, "%s: capture mode %d", what, int(mode))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return errDestroyed(h, what)
	}
	if s.cap != nil {
		return errf(driver.ErrAlreadyCapturing, "%s: stream %#x", what, uint64(h))
	}
	c := &capture{s: s, mode: mode}
	d.mu.Lock()
	if mode == driver.Global {
		d.globalCaps[c] = struct{}{}
	}
	d.allCaps[c] = struct{}{}
	d.mu.Unlock()
	s.cap = c
	s.capturing.Store(true)
	return nil
}

// EndCapture turns the recorded work into a graph. An invalidated capture
// yields no graph and releases every allocation it made.
func (d *Driver) EndCapture(h driver.Stream) (driver.GraphHandle, error) {
	const what = "end capture"
	s, err := d.openStream(h, what)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cap
	if c == nil {
		return 0, errf(driver.ErrNotCapturing, "%s: stream %#x", what, uint64(h))
	}
	s.cap = nil
	s.capturing.Store(false)
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.globalCaps, c)
	delete(d.allCaps, c)
	if c.state != captureActive {
		for _, r := range c.allocs {
			d.releaseLocked(r)
		}
		return 0, c.invalidatedErr(what)
	}
	g := &graph{ops: c.ops, allocs: c.allocs, mayBlock: chunksMayBlock(c.ops)}
	c.ops = nil
	for _, r := range c.allocs {
		r.graph, r.graphFreed = g, r.freedIn == c
		r.cap, r.freedIn = nil, nil
	}
	g.h = driver.GraphHandle(d.handle())
	d.graphs[g.h] = g
	return g.h, nil
}

// StreamCaptureStatus is always legal. The allocator asks before every
// operation (its lane's Free too), so the common answer, a live stream
// that is not capturing, is a small function with no frame to set up for
// the locks and defers of the rest (streamCaptureStatus); it reads what
// the rest would read first, in the same order.
func (d *Driver) StreamCaptureStatus(h driver.Stream) (driver.CaptureStatus, error) {
	if !d.closed.Load() {
		if s := d.hot[uint64(h)%hotStreams].Load(); s != nil && s.h == h && !s.capturing.Load() {
			return driver.CaptureNone, nil
		}
	}
	return d.streamCaptureStatus(h)
}

func (d *Driver) streamCaptureStatus(h driver.Stream) (driver.CaptureStatus, error) {
	s, err := d.openStream(h, "stream capture status")
	if err != nil {
		return driver.CaptureNone, err
	}
	if !s.capturing.Load() {
		return driver.CaptureNone, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cap == nil {
		return driver.CaptureNone, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.cap.state != captureActive {
		return driver.CaptureInvalidated, nil
	}
	return driver.CaptureActive, nil
}
