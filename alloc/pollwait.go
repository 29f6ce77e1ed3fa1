package alloc

import (
	"errors"
	"runtime"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// pollerOf is the non-blocking "is the stream done?" of drv: StreamPoll
// where the driver needs polling to progress, StreamIdle where its device
// progresses by itself (cudaStreamQuery), nil where it has neither.
func pollerOf(drv driver.Driver) func(driver.Stream) (bool, error) {
	if p, ok := drv.(driver.StreamPoller); ok {
		return p.StreamPoll
	}
	if i, ok := drv.(driver.StreamIdler); ok {
		return i.StreamIdle
	}
	return nil
}

// waitPolled is Synchronize (once false) and Query (once true) under the
// watchdog on a driver that can be polled: the caller's own goroutine
// waits, polling the stream with a backoff and checking the deadline
// itself, so no worker goroutine and no wake-up across goroutines is
// involved (docs/allocator-core.md, "Waits without a hand-off"). Past the deadline the caller gets ErrCaptureTimeout, counted
// in Stats().Timeouts, and an Aborter is aborted, as with a watched call.
//
// The first step is the idle check the allocator always made inline: it
// reads no clock and registers nothing, so an idle stream, or work the
// poll finishes at once (a cpu memset), costs what it did unwatched. Only a
// wait that goes on is registered with the monitor, which then sees a
// poll that hangs in the driver (pause, expirePoll).
//
// With handOff, a wait still going after the quick polls (spinPolls) ends
// here with long set, nothing waited for: the caller makes the watched
// blocking call, which returns as soon as the stream is done. Polling on
// with sleeps would return up to a millisecond late (a sleep under one is
// rounded up to about one in an idle process), which a step of a few
// milliseconds on a GPU cannot afford; short waits, the case the hand-off
// costed most, end within the quick polls.
func (g *guard) waitPolled(op string, once, handOff bool) (done, long bool, err error) {
	w := g.watchdog
	if n := w.stuck.Load(); n > 0 {
		return false, false, g.fail(op, -1, StateNone, wrapf(ErrCaptureTimeout, "%s not attempted: %d earlier driver call(s) still stuck", op, n))
	}
	var p pollStep
	defer p.release(g)
	over, done, err := p.try(g, once)
	if !over {
		c := newPollWatch(w, op)
		var b backoff
		for !over && err == nil {
			if handOff && b.polls >= spinPolls {
				long = true
				break
			}
			if err = c.pause(&b); err == nil {
				over, done, err = p.try(g, once)
			}
		}
		err = c.finish(err)
	}
	if errors.Is(err, driver.ErrWouldBlock) {
		return false, true, nil // the blocking call runs it
	}
	if err != nil {
		return false, false, g.fail(op, -1, p.st, err)
	}
	return done, long, nil
}

// pollStep is a polling wait's progress. Every wait on the way is a try:
// the gate's shared side is tried, and once had is held to the end, as the
// blocking call holds it, so no capture begins in the domain while the
// wait's queries may still run; a capture begin or end of this allocator
// in flight is waited out; then the state is read, the refusals apply, and
// the stream is polled.
type pollStep struct {
	gate    bool // holding the gate's shared side
	checked bool // state read and allowed
	st      CaptureState
}

// try makes one step without waiting. over says the wait is over: the
// stream is done (done), or err is final, or once is set and the stream
// was polled.
func (p *pollStep) try(g *guard, once bool) (over, done bool, err error) {
	if !p.gate {
		if !g.dom.gate.TryRLock() {
			return false, false, nil
		}
		p.gate = true
	}
	if !p.checked {
		g.mu.Lock()
		if g.transition != nil {
			g.mu.Unlock()
			return false, false, nil
		}
		p.st, err = g.stateLocked()
		if err == nil {
			err = g.syncRefusalLocked(p.st)
		}
		g.mu.Unlock()
		if err != nil {
			return true, false, err
		}
		p.checked = true
	}
	done, err = g.poll(g.stream)
	if errors.Is(err, driver.ErrWouldBlock) {
		return true, false, err
	}
	return done || err != nil || once, done && err == nil, err
}

func (p *pollStep) release(g *guard) {
	if p.gate {
		g.dom.gate.RUnlock()
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
		err := wrapf(ErrCaptureTimeout, "%s: still waiting after %v (for the stream, or for a capture begin or end)", c.op, c.w.timeout)
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
// Precise sleeps (nanosleep, a timerfd in the netpoller) were measured and
// not taken: they cost more CPU per wait, and nanosleep holds a thread and
// its P while it sleeps.
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
