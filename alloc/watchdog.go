package alloc

import (
	"sync/atomic"
	"time"
)

// watchdog bounds calls that may block in the driver. A call past its
// deadline is abandoned, not cancelled (a goroutine stuck in a driver cannot
// be freed); while one is still stuck, further blocking calls fail at once
// instead of queueing behind it.
//
// A watched call runs on a reused worker goroutine while its caller waits;
// one monitor goroutine per process keeps every deadline (monitor.go), so a
// call costs a hand-off to a parked worker and back, not a new goroutine,
// timer and channel (BENCHMARKS.md).
type watchdog struct {
	timeout time.Duration // 0: no watchdog
	stuck   atomic.Int32
	expired atomic.Uint64
	// abort, when the driver is an Aborter, tears the backend down on an
	// expiry so the stuck call returns instead of lingering.
	abort func(cause error)
}

// run runs f with its own deadline (<= 0: none). Past the deadline the
// caller gets ErrCaptureTimeout and f is abandoned; when it finally returns,
// late (if not nil) gets its error, in f's goroutine, so that whatever f
// did can be undone. Exactly one of the two sees f's result: the caller's
// return value (expired false) or late (expired true, and err wraps
// ErrCaptureTimeout). A call refused because an earlier one is still stuck
// is not attempted (expired false).
func (w *watchdog) run(op string, timeout time.Duration, f func() error, late func(error)) (expired bool, err error) {
	if n := w.stuck.Load(); n > 0 {
		return false, wrapf(ErrCaptureTimeout, "%s not attempted: %d earlier driver call(s) still stuck", op, n)
	}
	if timeout <= 0 {
		return false, f()
	}
	c := newWatch(w, f, late, timeout)
	watches.add(c) // before the worker can see it, so its removal finds it
	dispatch(c)
	if <-c.wake == watchReturned {
		err := c.err
		c.recycle()
		return false, err
	}
	// The monitor expired c and counted it stuck; c now belongs to its
	// worker, which hands f's result to late and recycles it.
	w.expired.Add(1)
	err = wrapf(ErrCaptureTimeout, "%s did not return within %v; the call is abandoned", op, timeout)
	if w.abort != nil {
		w.abort(err)
	}
	return true, err
}
