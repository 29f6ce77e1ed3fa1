package nccl

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/symheap"
)

// Every call on a communicator is made so that it cannot hang the engine
// (PyTorch's NCCL watchdog does the same): the call runs on the caller's
// thread (NCCL's group state is per thread) while a timer holds its
// deadline; at the deadline the communicator is aborted (ncclCommAbort),
// which makes a call blocked in NCCL return, and the caller gets
// ErrCollectiveTimeout. A call that returns ncclInProgress (a nonblocking
// communicator: Config.Blocking Nonblocking, or NCCL_COMM_BLOCKING=0) is
// followed by polling
// ncclCommGetAsyncError until it settles, under the same deadline. An
// aborted communicator is never called again: every later call is
// ErrCommAborted, with no NCCL call.

// ErrCollectiveTimeout is symheap's sentinel, shared: an NCCL call or wait
// that did not finish within its timeout. The error names the call and
// the communicator, which is aborted.
var ErrCollectiveTimeout = symheap.ErrCollectiveTimeout

// ErrCommAborted: the communicator was aborted (after a timeout, an
// asynchronous NCCL error, or Abort); calls on it are refused with no NCCL
// call. It wraps alloc.ErrClosed.
var ErrCommAborted = fmt.Errorf("%w: nccl: communicator aborted", alloc.ErrClosed)

const (
	ncclInProgress = 7 // ncclResult_t (nccl.h, 2.14 and later)

	pollFirst = 20 * time.Microsecond
	pollMax   = 5 * time.Millisecond
)

// watch makes call, which uses comms, within timeout (<= 0: unbounded).
// Past it every comm is aborted and the result is ErrCollectiveTimeout
// naming op and the first comm.
func (l *Library) watch(op string, comms []*Comm, timeout time.Duration, call func() int32) error {
	var fired atomic.Bool
	var t *time.Timer
	aborted := make(chan struct{}) // closed once the timer has aborted every comm
	if timeout > 0 {
		t = time.AfterFunc(timeout, func() {
			defer close(aborted)
			fired.Store(true)
			for _, c := range comms {
				c.abort(fmt.Errorf("%w: nccl: %s on %s did not finish within %v", ErrCollectiveTimeout, op, c, timeout))
			}
		})
	}
	r := call()
	if r == ncclInProgress {
		r = settle(comms, &fired)
	}
	if t != nil && !t.Stop() {
		// The timer fired: the caller sees the timeout only once every
		// comm is aborted, so its next call is refused, never made into a
		// comm the timer is still aborting.
		<-aborted
		return fmt.Errorf("%w: nccl: %s on %s did not finish within %v; the communicator is aborted (ncclCommAbort)", ErrCollectiveTimeout, op, comms[0], timeout)
	}
	return l.check(op, r)
}

// settle polls ncclCommGetAsyncError on comms until none is in progress,
// one fails, or fired is set (the timer aborted them).
func settle(comms []*Comm, fired *atomic.Bool) int32 {
	wait := pollFirst
	for !fired.Load() {
		busy := false
		for _, c := range comms {
			r, err := c.asyncError()
			if err != nil {
				return ncclInvalidUsage
			}
			if r == ncclInProgress {
				busy = true
			} else if r != ncclSuccess {
				return r
			}
		}
		if !busy {
			return ncclSuccess
		}
		time.Sleep(wait)
		wait = min(2*wait, pollMax)
	}
	return ncclInProgress
}

// asyncError is ncclCommGetAsyncError on a usable c.
func (c *Comm) asyncError() (int32, error) {
	h, err := c.handle("ncclCommGetAsyncError")
	if err != nil {
		return 0, err
	}
	var st int32
	if err := c.l.check("ncclCommGetAsyncError", gpurt.Call(c.l.getAsyncError, h, uintptr(unsafe.Pointer(&st)))); err != nil {
		return 0, err
	}
	return st, nil
}

// Wait waits until the work queued on a's stream is done, for at most a's
// watchdog timeout (alloc.Options.Watchdog), polling ncclCommGetAsyncError
// as it goes: an asynchronous NCCL error aborts c and is returned (a
// driver error naming it), and past the timeout c is aborted and the
// result is ErrCollectiveTimeout naming c. Use it instead of
// a.Synchronize after collectives whose peers may be gone: Synchronize
// would time out too but leave the communicator hung. Refused, like
// Synchronize, during a capture that forbids it.
func (c *Comm) Wait(a *alloc.Allocator) error {
	if _, err := c.handle("wait"); err != nil {
		return err
	}
	timeout := a.WatchdogTimeout()
	start := time.Now()
	wait := pollFirst
	for {
		done, err := a.Query()
		if errors.Is(err, alloc.ErrCaptureTimeout) { // the allocator's watchdog expired on the stream
			err = fmt.Errorf("%w: nccl: wait on %s: %w; the communicator is aborted (ncclCommAbort)", ErrCollectiveTimeout, c, err)
			c.abort(err)
			return err
		}
		if err != nil {
			return err
		}
		r, err := c.asyncError()
		if err != nil {
			return err
		}
		if r != ncclSuccess && r != ncclInProgress {
			err := c.l.check("ncclCommGetAsyncError", r)
			c.abort(err)
			return fmt.Errorf("nccl: wait on %s: %w; the communicator is aborted", c, err)
		}
		if done && r == ncclSuccess {
			return nil
		}
		if timeout > 0 && time.Since(start) >= timeout {
			err := fmt.Errorf("%w: nccl: wait on %s: the stream's work did not finish within %v; the communicator is aborted (ncclCommAbort)", ErrCollectiveTimeout, c, timeout)
			c.abort(err)
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, pollMax)
	}
}

// Abort aborts c (ncclCommAbort): operations still running on it stop and
// its resources are freed. Every later call on c is ErrCommAborted, and
// Destroy returns nil with no call. Aborting twice is a no-op.
func (c *Comm) Abort() error {
	if _, err := c.handle("abort"); err != nil {
		if c.abortCause() != nil {
			return nil
		}
		return err
	}
	return c.abort(fmt.Errorf("%w: by Abort", ErrCommAborted))
}

// abort marks c aborted with cause and calls ncclCommAbort once; later
// calls are no-ops.
func (c *Comm) abort(cause error) error {
	c.mu.Lock()
	h := c.h
	if h == 0 || c.aborted != nil {
		c.mu.Unlock()
		return nil
	}
	c.aborted = cause
	c.h = 0
	c.mu.Unlock()
	return c.l.check("ncclCommAbort", gpurt.Call(c.l.commAbort, h))
}

func (c *Comm) abortCause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.aborted
}

// handle is c's ncclComm_t while c is usable: a destroyed communicator is
// alloc.ErrClosed, an aborted one ErrCommAborted with its cause.
func (c *Comm) handle(op string) (uintptr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.aborted != nil:
		return 0, fmt.Errorf("%w: %s refused on %s (%v)", ErrCommAborted, op, c, c.aborted)
	case c.h == 0:
		return 0, fmt.Errorf("%w: nccl: %s on a destroyed communicator", alloc.ErrClosed, op)
	}
	return c.h, nil
}

// String names c in errors: its rank, size and, when it has one, its
// split's color.
func (c *Comm) String() string {
	if c.split != "" {
		return fmt.Sprintf("communicator rank %d of %d (%s)", c.rank, c.ranks, c.split)
	}
	return fmt.Sprintf("communicator rank %d of %d", c.rank, c.ranks)
}

// SetTimeout bounds the communicator's calls made without an allocator
// (Split, Destroy, a Group's end when its operations named none); d <= 0
// leaves them unbounded. The default is alloc.DefaultWatchdog. Calls made
// through an allocator are bounded by its watchdog timeout.
func (c *Comm) SetTimeout(d time.Duration) {
	c.mu.Lock()
	c.timeout = d
	c.mu.Unlock()
}

func (c *Comm) ownTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}
