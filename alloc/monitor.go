package alloc

import (
	"container/heap"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// A watch is one call under the watchdog, recycled through watchPool.
// Its state moves once, from running to returned (by its worker) or to
// expired (by the monitor); whoever wins wakes the caller.
type watch struct {
	w        *watchdog
	f        func() error
	late     func(error)
	err      error  // f's result, when returned
	poll     bool   // a polling wait on its caller's goroutine (pollwait.go), not f
	op       string // a polling wait's operation, for its error
	deadline int64  // monoNow units
	index    int    // in the monitor's heap; -1 when not there
	state    atomic.Int32
	wake     chan int32 // capacity 1: the caller's one wake-up, with the outcome
}

const (
	watchRunning int32 = iota
	watchReturned
	watchExpired
)

var watchPool = sync.Pool{New: func() any { return &watch{index: -1, wake: make(chan int32, 1)} }}

func newWatch(w *watchdog, f func() error, late func(error), timeout time.Duration) *watch {
	c := watchPool.Get().(*watch)
	c.w, c.f, c.late = w, f, late
	c.deadline = monoNow() + int64(timeout)
	c.state.Store(watchRunning)
	return c
}

func (c *watch) recycle() {
	c.w, c.f, c.late, c.err, c.poll, c.op = nil, nil, nil, nil, false, ""
	watchPool.Put(c)
}

// runOn is the worker's half: run f, then either hand its result to the
// caller or, if the monitor already gave the caller ErrCaptureTimeout, to
// late.
func (c *watch) runOn() {
	err := c.f()
	if c.state.CompareAndSwap(watchRunning, watchReturned) {
		watches.remove(c)
		c.err = err
		c.wake <- watchReturned // c is the caller's from here on
		return
	}
	// Expired: wait until the monitor is done with c (it expires under
	// m.mu), so c is not recycled under it.
	watches.mu.Lock()
	//lint:ignore SA2001 an empty critical section is the barrier
	watches.mu.Unlock()
	// The call returned: it is stuck no more. Uncounted before late runs,
	// so a caller who sees late's cleanup done (a capture ended) is not
	// then refused for a call that is no longer stuck.
	c.w.stuck.Add(-1)
	if c.late != nil {
		c.late(err)
	}
	c.recycle()
}

// Workers: a watched call goes to a parked worker if one is idle, else to a
// new goroutine that parks afterwards. At most maxIdleWorkers stay parked;
// a worker stuck in the driver is simply lost, as before.
const maxIdleWorkers = 8

var (
	workQueue   = make(chan *watch)
	idleWorkers atomic.Int32
)

func dispatch(c *watch) {
	select {
	case workQueue <- c:
	default:
		go worker(c)
	}
}

func worker(c *watch) {
	for {
		c.runOn()
		if idleWorkers.Add(1) > maxIdleWorkers {
			idleWorkers.Add(-1)
			return
		}
		c = <-workQueue
		idleWorkers.Add(-1)
	}
}

// monitor keeps the deadlines of every watched call in the process in one
// heap and sleeps until the earliest. It is woken only when a call's
// deadline is earlier than the wake-up it planned, so a steady stream of
// calls with one timeout does not wake it at all.
type monitor struct {
	once   sync.Once
	mu     sync.Mutex
	h      watchHeap
	wakeAt int64         // planned wake-up; math.MaxInt64 when idle
	kick   chan struct{} // capacity 1
}

var watches = &monitor{wakeAt: math.MaxInt64, kick: make(chan struct{}, 1)}

func (m *monitor) add(c *watch) {
	m.once.Do(func() { go m.loop() })
	m.mu.Lock()
	heap.Push(&m.h, c)
	if c.deadline < m.wakeAt {
		m.wakeAt = c.deadline
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
}

func (m *monitor) remove(c *watch) {
	m.mu.Lock()
	if c.index >= 0 {
		heap.Remove(&m.h, c.index)
	}
	m.mu.Unlock()
}

func (m *monitor) loop() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		m.mu.Lock()
		now := monoNow()
		for len(m.h) > 0 && m.h[0].deadline <= now {
			m.expire(heap.Pop(&m.h).(*watch))
		}
		next := int64(math.MaxInt64)
		if len(m.h) > 0 {
			next = m.h[0].deadline
		}
		m.wakeAt = next
		m.mu.Unlock()
		if next == math.MaxInt64 {
			<-m.kick
			continue
		}
		t.Reset(time.Duration(next - now))
		select {
		case <-t.C:
		case <-m.kick:
			t.Stop()
		}
	}
}

// expire gives c's caller the timeout unless its worker returned first.
// Caller holds m.mu, which c's worker waits for before it uncounts and
// recycles c; the call counts as stuck before its caller wakes.
func (m *monitor) expire(c *watch) {
	if c.poll {
		c.expirePoll()
		return
	}
	if !c.state.CompareAndSwap(watchRunning, watchExpired) {
		return
	}
	c.w.stuck.Add(1)
	c.wake <- watchExpired // the caller must not touch c after this
}

// watchHeap orders watches by deadline (container/heap).
type watchHeap []*watch

func (h watchHeap) Len() int           { return len(h) }
func (h watchHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h watchHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *watchHeap) Push(x any) {
	c := x.(*watch)
	c.index = len(*h)
	*h = append(*h, c)
}
func (h *watchHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	c.index = -1
	*h = old[:len(old)-1]
	return c
}

// monoNow reads the monotonic clock in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoBase)) }

var monoBase = time.Now()
