package alloc

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// CaptureOptions configures WithCapture.
type CaptureOptions struct {
	Mode CaptureMode
	// Timeout bounds fn; zero means the allocator's watchdog deadline,
	// negative means no bound.
	Timeout time.Duration
	// EagerFallback: when the driver cannot capture (ErrCaptureUnavailable),
	// run fn eagerly instead and return a Graph whose Launch runs fn again.
	EagerFallback bool
	// Pool, when set, captures into a graph pool of the allocator's: the
	// graph shares the pool's memory with the pool's other graphs
	// (GraphPool, docs/graph-pools.md).
	Pool *GraphPool
	// Name names the graph in views, metrics, logs and errors (Graph.Name):
	// "batch-8" is shown as "batch-8 (graph 12)", 12 being its Graph.ID.
	Name string
}

// WithCapture captures what fn enqueues on the allocator and returns the
// graph. An error from fn wins over the EndCapture error, and a failed
// capture releases everything it took (and counts as a failed capture). If
// fn and the capture end outlive the deadline, the caller gets
// ErrCaptureTimeout at the deadline; the capture is abandoned (operations
// on the allocator fail with ErrCaptureTimeout) and is ended and released
// when fn finally returns.
//
// fn runs on a goroutine of its own (so that the deadline can be kept
// while it runs), not the caller's: it must not rely on the caller's
// goroutine or OS thread (runtime.LockOSThread). A panic in fn ends the
// capture and is re-raised in the caller with the same value; the stack
// of fn's goroutine where it panicked, which the re-raise cannot carry
// without changing the value, is logged first (Options.Logger, at error
// level) so that a crash shows where fn failed.
func (a *Allocator) WithCapture(opts CaptureOptions, fn func() error) (*Graph, error) {
	if fn == nil {
		return nil, a.fail("WithCapture", -1, StateNone, wrapf(ErrInvalidValue, "nil function"))
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = a.guard.watchdog.timeout
	}
	c, err := beginCapture(a, opts.Mode, opts.Pool, opts.Name)
	if err != nil {
		if opts.EagerFallback && errors.Is(err, driver.ErrCaptureUnavailable) {
			return newEagerGraph(a, opts.Name, fn)
		}
		return nil, err
	}
	return c.record(fn, timeout)
}

// record is WithCapture's machinery once c began: fn runs on a goroutine
// of its own while the caller waits, at most timeout (<= 0: no bound),
// then c is ended and fn's outcome decides what the caller gets.
func (c *capture) record(fn func() error, timeout time.Duration) (*Graph, error) {
	a := c.a
	start := time.Now()
	done := make(chan captureResult, 1)
	go func() {
		var r captureResult
		defer func() {
			if p := recover(); p != nil {
				r.panic, r.stack = p, debug.Stack()
			}
			done <- r
		}()
		r.err = fn()
	}()
	var r captureResult
	endTimeout := a.guard.watchdog.timeout // no bound on fn: the watchdog's on the end
	if timeout > 0 {
		t := time.NewTimer(timeout)
		select {
		case r = <-done:
			t.Stop()
		case <-t.C:
			c.abandon(done)
			return nil, a.fail("WithCapture", -1, StateInvalidated, wrapf(ErrCaptureTimeout, "captured function still running after %v; capture abandoned", timeout))
		}
		// The capture end gets what is left of the deadline (a
		// millisecond at least, so a fast end is never refused).
		endTimeout = max(timeout-time.Since(start), time.Millisecond)
	} else {
		r = <-done
	}

	g, endErr := endCapture(a, endTimeout)
	if r.panic != nil || r.err != nil {
		if g != nil {
			a.mu.Lock()
			a.stats.Captures--
			a.stats.FailedCapture++
			a.mu.Unlock()
			_ = g.Close()
		}
		if r.panic != nil {
			a.opts.logger().Error("capalloc: WithCapture's function panicked; re-raising the panic in the caller",
				"backend", a.backend, "panic", fmt.Sprint(r.panic), "stack", string(r.stack))
			panic(r.panic)
		}
		if endErr != nil {
			return nil, fmt.Errorf("%w (and ending the capture: %v)", r.err, endErr)
		}
		return nil, r.err
	}
	return g, endErr
}

// captureResult is how WithCapture's function ends: its error, or its
// panic and the stack of its goroutine when it panicked.
type captureResult struct {
	err   error
	panic any
	stack []byte
}

// abandon marks c abandoned and arranges for it to be ended and released
// when its function returns, whether or not the allocator was closed
// meanwhile (Close leaves an abandoned capture, and its own teardown, to
// this): the driver's capture end (on the thread that began it, the
// driver's business), its graph discarded, the domain told, then Close's
// teardown if it waits.
func (c *capture) abandon(done <-chan captureResult) {
	a := c.a
	a.guard.watchdog.expired.Add(1)
	a.mu.Lock()
	c.abandoned = true
	a.mu.Unlock()
	go func() {
		<-done
		a.mu.Lock()
		if a.guard.cap == c {
			if g, _ := c.endLocked(a.guard.watchdog.timeout); g != nil {
				a.stats.Captures--
				a.stats.FailedCapture++
				g.closeLocked()
			}
		}
		a.mu.Unlock()
		a.releases.flush()
		a.finishClose(a.releases.cleanup)
	}()
}
