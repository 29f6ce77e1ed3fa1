package alloc

import (
	"sync"
	"sync/atomic"
	"time"
)

// domain is the process-wide record of captures for one CaptureDomain. CUDA
// forbids unsafe calls from every Global-mode thread while any Global-mode
// capture is active in the process, so the allocator must know about
// captures other allocators started. The set is keyed by stream, so ending
// a capture twice is harmless.
type domain struct {
	// gate orders unsafe driver calls (read side, held for the duration of
	// the call) against capture begin (write side): a capture never starts
	// while an unsafe call that it would forbid is in flight.
	gate sync.RWMutex

	mu      sync.Mutex
	streams map[Stream]CaptureMode
	global  atomic.Int32 // Global-mode captures in streams
}

var (
	domainsMu sync.Mutex
	domains   = map[string]*domain{}
)

func domainFor(name string) *domain {
	domainsMu.Lock()
	defer domainsMu.Unlock()
	d := domains[name]
	if d == nil {
		d = &domain{streams: map[Stream]CaptureMode{}}
		domains[name] = d
	}
	return d
}

func (d *domain) add(s Stream, m CaptureMode) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.streams[s]; ok {
		return
	}
	d.streams[s] = m
	if m == Global {
		d.global.Add(1)
	}
}

func (d *domain) remove(s Stream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.streams[s]
	if !ok {
		return
	}
	delete(d.streams, s)
	if m == Global {
		d.global.Add(-1)
	}
}

// globalElsewhere reports whether a Global-mode capture is active on a
// stream other than own.
func (d *domain) globalElsewhere(own Stream) bool {
	if d.global.Load() == 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for s, m := range d.streams {
		if s != own && m == Global {
			return true
		}
	}
	return false
}

// lockGate takes the write side of the gate, giving up after timeout
// (<= 0: wait forever) so that a hung unsafe call cannot hang capture begin.
func (d *domain) lockGate(timeout time.Duration) bool {
	if timeout <= 0 {
		d.gate.Lock()
		return true
	}
	deadline := time.Now().Add(timeout)
	wait := 20 * time.Microsecond
	for !d.gate.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
		if wait < 5*time.Millisecond {
			wait *= 2
		}
	}
	return true
}
