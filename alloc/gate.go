package alloc

import (
	"sync"
	"time"
)

// gate orders unsafe driver calls (shared side, held for the duration of
// the call) against capture begin (exclusive side): a capture never starts
// while an unsafe call that it would forbid is in flight.
//
// It prefers the exclusive side: once a capture begin waits, new shared
// holders wait behind it, so a stream of unsafe calls from busy goroutines
// cannot starve a capture begin (sync.RWMutex prefers writers too, but its
// Lock cannot give up, and a capture begin must: a hung unsafe call holds
// the shared side forever). A waiting begin that gives up lets the shared
// side through again.
//
// The shared side is not reentrant: a holder that asks for it again while a
// begin waits would wait for itself. Code under the shared side never takes
// it again (TryRLock is fine).
type gate struct {
	mu      sync.Mutex
	readers int           // shared holders
	writer  bool          // exclusive holder
	waiting int           // exclusive waiters, which hold new readers back
	changed chan struct{} // closed and replaced whenever the state loosens
}

// RLock takes the shared side, waiting while the exclusive side is held or
// wanted.
func (g *gate) RLock() {
	for {
		g.mu.Lock()
		if !g.writer && g.waiting == 0 {
			g.readers++
			g.mu.Unlock()
			return
		}
		ch := g.changedLocked()
		g.mu.Unlock()
		<-ch
	}
}

// TryRLock takes the shared side if it can now.
func (g *gate) TryRLock() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.writer || g.waiting > 0 {
		return false
	}
	g.readers++
	return true
}

// RUnlock releases the shared side.
func (g *gate) RUnlock() {
	g.mu.Lock()
	g.readers--
	if g.readers < 0 {
		g.mu.Unlock()
		panic("capalloc: gate.RUnlock without RLock")
	}
	if g.readers == 0 {
		g.broadcastLocked()
	}
	g.mu.Unlock()
}

// Lock takes the exclusive side, giving up after timeout (<= 0: waits for
// ever). It reports whether it got it.
func (g *gate) Lock(timeout time.Duration) bool {
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	g.mu.Lock()
	g.waiting++
	for g.writer || g.readers > 0 {
		ch := g.changedLocked()
		g.mu.Unlock()
		select {
		case <-ch:
			g.mu.Lock()
		case <-expired:
			g.mu.Lock()
			g.waiting--
			g.broadcastLocked() // readers held back by this waiter may go
			g.mu.Unlock()
			return false
		}
	}
	g.waiting--
	g.writer = true
	g.mu.Unlock()
	return true
}

// Unlock releases the exclusive side.
func (g *gate) Unlock() {
	g.mu.Lock()
	if !g.writer {
		g.mu.Unlock()
		panic("capalloc: gate.Unlock without Lock")
	}
	g.writer = false
	g.broadcastLocked()
	g.mu.Unlock()
}

func (g *gate) changedLocked() chan struct{} {
	if g.changed == nil {
		g.changed = make(chan struct{})
	}
	return g.changed
}

func (g *gate) broadcastLocked() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
}
