package alloc

import (
	"sync/atomic"
	"time"
)

// watchdog bounds calls that may block in the driver. A call past its
// deadline is abandoned, not cancelled (a goroutine stuck in a driver cannot
// be freed); while one is still stuck, further blocking calls fail at once
// instead of queueing behind it.
type watchdog struct {
	timeout time.Duration // 0: no watchdog
	stuck   atomic.Int32
	expired atomic.Uint64
	// abort, when the driver is an Aborter, tears the backend down on an
	// expiry so the stuck call returns instead of lingering.
	abort func(cause error)
}

// call runs f under the deadline. f must do its own locking, so that locks it
// holds are released by whoever finishes it, even after an expiry.
func (w *watchdog) call(op string, f func() error) error {
	return w.callUndo(op, func() (func(), error) { return nil, f() })
}

// callUndo is call for an f that acquires something: if the caller was
// already given ErrCaptureTimeout when f succeeds, nobody will ever own the
// result, so undo releases it.
func (w *watchdog) callUndo(op string, f func() (undo func(), err error)) error {
	if n := w.stuck.Load(); n > 0 {
		return wrapf(ErrCaptureTimeout, "%s not attempted: %d earlier driver call(s) still stuck", op, n)
	}
	if w.timeout <= 0 {
		_, err := f()
		return err
	}
	type result struct {
		undo func()
		err  error
	}
	done := make(chan result, 1)
	go func() {
		undo, err := f()
		done <- result{undo, err}
	}()
	t := time.NewTimer(w.timeout)
	select {
	case r := <-done:
		t.Stop()
		return r.err
	case <-t.C:
		w.expired.Add(1)
		w.stuck.Add(1)
		go func() {
			if r := <-done; r.err == nil && r.undo != nil {
				r.undo()
			}
			w.stuck.Add(-1)
		}()
		err := wrapf(ErrCaptureTimeout, "%s did not return within %v; the call is abandoned", op, w.timeout)
		if w.abort != nil {
			w.abort(err)
		}
		return err
	}
}
