package alloc

import (
	"errors"
	"runtime"
	"time"
)

// StreamPoller is a StreamIdler whose device makes progress only when the
// host looks (the cpu backend, whose streams run their work when waited
// for). StreamPoll reports, without waiting, whether the stream has nothing
// left to do, and makes the progress a GPU would have made meanwhile, on
// the calling goroutine for work that cannot block and elsewhere for work
// that can (a host function). When done, the error is the failure of work
// already run, as StreamSynchronize reports it. Same capture rules as
// StreamQuery. Like StreamIdler, a driver whose calls may hang (a plugin
// host) must not implement it.
type StreamPoller interface {
	StreamPoll(s Stream) (bool, error)
}

// pollerOf is the non-blocking "is the stream done?" of drv: StreamPoll
// where the driver needs polling to progress, StreamIdle where its device
// progresses by itself (cudaStreamQuery), nil where it has neither.
func pollerOf(drv Driver) func(Stream) (bool, error) {
	if p, ok := drv.(StreamPoller); ok {
		return p.StreamPoll
	}
	if i, ok := drv.(StreamIdler); ok {
		return i.StreamIdle
	}
	return nil
}

// waitPolled is Synchronize (once false) and Query (once true) under the
// watchdog on a driver that can be polled: the caller's own goroutine
// waits, polling the stream with a backoff and checking the deadline
// itself, so no worker goroutine and no wake-up across goroutines is
// involved (issue 23, item 1; docs/allocator-core.md, "Waits without a
// hand-off"). Past the deadline the caller gets ErrCaptureTimeout, counted
// in Stats().Timeouts, and an Aborter is aborted, as with a watched call.
//
// Every wait on the way is a poll: the gate's shared side is tried, a
// capture transition is waited out by polling, and the stream is polled.
// The gate is held from the first successful try to the end, as the
// blocking call holds it, so no capture begins in the domain while the
// wait's queries may still run.
//
// The driver calls made here are promised not to block (the capture
// status, the stream poll); a call that breaks the promise still cannot
// be interrupted, but it is seen: the call is registered with the
// monitor, which at the deadline counts it stuck (further blocking calls
// fail at once instead of piling into the same driver) and aborts an
// Aborter; the caller gets ErrCaptureTimeout when the call returns.
func (a *Allocator) waitPolled(op string, once bool) (done bool, err error) {
	w := a.watchdog
	if n := w.stuck.Load(); n > 0 {
		return false, a.fail(op, -1, StateNone, wrapf(ErrCaptureTimeout, "%s not attempted: %d earlier driver call(s) still stuck", op, n))
	}
	c := newPollWatch(w, op)
	st, done, err := a.pollLoop(c, once)
	if err = c.finish(err); err != nil {
		return false, a.fail(op, -1, st, err)
	}
	return done, nil
}

// pollLoop is waitPolled's wait, with c registered.
func (a *Allocator) pollLoop(c *watch, once bool) (st CaptureState, done bool, err error) {
	var b backoff
	for !a.dom.gate.TryRLock() {
		if err := c.pause(&b); err != nil {
			return st, false, err
		}
	}
	defer a.dom.gate.RUnlock()
	for {
		a.mu.Lock()
		if a.transition == nil {
			st, err = a.stateLocked()
			if err == nil {
				err = a.syncRefusalLocked(st)
			}
			a.mu.Unlock()
			break
		}
		a.mu.Unlock()
		if err := c.pause(&b); err != nil {
			return st, false, err
		}
	}
	if err != nil {
		return st, false, err
	}
	for {
		done, err := a.poll(a.stream)
		if done || err != nil || once {
			return st, done && err == nil, err
		}
		if err := c.pause(&b); err != nil {
			return st, false, err
		}
	}
}

// Poll watch states, beyond watchRunning (in a driver call, or about to
// make one) and watchExpired (the monitor found it in a call at the
// deadline): between two polls, and over.
const (
	pollSleeping int32 = iota + watchExpired + 1
	pollOver
)

// newPollWatch registers a polling wait of w's with the monitor, as in a
// driver call.
func newPollWatch(w *watchdog, op string) *watch {
	c := newWatch(w, nil, nil, w.timeout)
	c.poll, c.op = true, op
	watches.add(c)
	return c
}

// pause is the wait between two polls: ErrCaptureTimeout once the
// deadline has passed, else a backoff step, outside any driver call.
func (c *watch) pause(b *backoff) error {
	now := monoNow()
	if now >= c.deadline {
		if !c.state.CompareAndSwap(watchRunning, pollOver) {
			return c.timeoutErr() // the monitor saw the call overstay and counted it
		}
		c.w.expired.Add(1)
		err := wrapf(ErrCaptureTimeout, "%s: the stream was still busy after %v", c.op, c.w.timeout)
		if c.w.abort != nil {
			c.w.abort(err)
		}
		return err
	}
	if !c.state.CompareAndSwap(watchRunning, pollSleeping) {
		return c.timeoutErr()
	}
	b.wait(now, c.deadline)
	c.state.Store(watchRunning)
	return nil
}

// expirePoll is the monitor's side of a polling wait at its deadline:
// nothing to do between polls (the caller checks its deadline itself), but
// a caller still in a driver call is stuck there: count it, so other calls
// fail at once, and abort an Aborter, whose abort makes the call return.
// Caller holds watches.mu.
func (c *watch) expirePoll() {
	if !c.state.CompareAndSwap(watchRunning, watchExpired) {
		return
	}
	c.w.stuck.Add(1)
	c.w.expired.Add(1)
	if abort := c.w.abort; abort != nil {
		go abort(c.timeoutErr())
	}
}

func (c *watch) timeoutErr() error {
	return wrapf(ErrCaptureTimeout, "%s: a driver call did not return within %v", c.op, c.w.timeout)
}

// finish unregisters c, after which the monitor no longer touches it, and
// settles the outcome: a wait the monitor found stuck in a call reports
// the timeout (with the call's own error, if any) and is uncounted.
func (c *watch) finish(err error) error {
	watches.remove(c)
	if c.state.Load() == watchExpired {
		c.w.stuck.Add(-1)
		if err == nil || !errors.Is(err, ErrCaptureTimeout) {
			err = errors.Join(c.timeoutErr(), err)
		}
	}
	c.recycle()
	return err
}

// The backoff between polls (docs/allocator-core.md, "Waits without a
// hand-off", has the measurements behind the figures). The first
// spinPolls polls only yield the processor, so work that ends within a
// few microseconds (a memset, a small copy) costs no sleep; then the wait
// sleeps for half the time waited so far, from minSleep to maxSleep, so a
// long wait wakes a bounded number of times per doubling of its length
// and at most every maxSleep. time.Sleep is the sleep: it parks the
// goroutine and holds no thread; in an otherwise idle process the runtime
// rounds a sleep under a millisecond up to about one, which bounds the
// wake-ups, and so the CPU a wait costs, to about one per millisecond.
// A precise sleep (a timerfd in the netpoller) was measured and not
// taken: each wake-up costs the scheduler tens of microseconds of CPU.
const (
	spinPolls     = 16
	minSleep      = 20 * time.Microsecond
	maxSleep      = 2 * time.Millisecond
	sleepFraction = 2
)

// backoff is one wait's progress through the schedule.
type backoff struct {
	start int64 // monoNow of the first pause
	polls int
}

// wait pauses before the next poll, never past deadline.
func (b *backoff) wait(now, deadline int64) {
	if b.polls == 0 {
		b.start = now
	}
	b.polls++
	if b.polls <= spinPolls {
		runtime.Gosched()
		return
	}
	d := min(max(time.Duration(now-b.start)/sleepFraction, minSleep), maxSleep, time.Duration(deadline-now))
	time.Sleep(d)
}
