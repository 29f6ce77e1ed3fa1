package alloc

import (
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// domain is the process-wide record of captures for one CaptureDomain. CUDA
// forbids unsafe calls from every Global-mode thread while any Global-mode
// capture is active in the process, so the allocator must know about
// captures other allocators started. The set is keyed by stream, so ending
// a capture twice is harmless.
type domain struct {
	// gate orders unsafe driver calls against capture begin (gate.go).
	gate gate

	mu       sync.Mutex
	streams  map[driver.Stream]CaptureMode
	global   atomic.Int32 // Global-mode captures in streams
	deferred []func()     // AfterGlobalCaptures work waiting for global == 0
	afterAny []func()     // strict safety's work waiting for no capture at all
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
		d = &domain{streams: map[driver.Stream]CaptureMode{}}
		domains[name] = d
	}
	return d
}

// active is the number of captures of any mode in the domain.
func (d *domain) active() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.streams)
}

func (d *domain) add(s driver.Stream, m CaptureMode) {
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

func (d *domain) remove(s driver.Stream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.streams[s]
	if !ok {
		return
	}
	delete(d.streams, s)
	if m == Global && d.global.Add(-1) == 0 && len(d.deferred) > 0 {
		// Not here: remove runs under an allocator's lock, and the deferred
		// work makes driver calls under the gate.
		go d.runDeferred()
	}
	if len(d.streams) == 0 && len(d.afterAny) > 0 {
		go d.runAfterAll()
	}
}

// afterAll runs fn, under the gate's read side, as soon as no capture of
// any mode is active in d: now, in a goroutine of its own (fn may take an
// allocator's lock its caller holds), or when the last one ends. Strict
// capture safety's deferred work (guard.go).
func (d *domain) afterAll(fn func()) {
	d.mu.Lock()
	d.afterAny = append(d.afterAny, fn)
	idle := len(d.streams) == 0
	d.mu.Unlock()
	if idle {
		go d.runAfterAll()
	}
}

// Two queues of deferred work, each with the captures it waits for:
// deferred for Global-mode ones (the documented rules), afterAny for
// captures of any mode (strict capture safety). anyLocked and
// globalLocked say whether such a capture is active; d.mu is held.
func (d *domain) anyLocked() bool    { return len(d.streams) > 0 }
func (d *domain) globalLocked() bool { return d.global.Load() > 0 }

// runQueue runs the work queued in *q under the gate's read side, unless
// busy says a capture it waits for began again meanwhile: then it stays
// queued for the next time the last one ends.
func (d *domain) runQueue(busy func() bool, q *[]func()) {
	d.gate.RLock()
	defer d.gate.RUnlock()
	d.mu.Lock()
	if busy() {
		d.mu.Unlock()
		return
	}
	fns := *q
	*q = nil
	d.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// nowOrQueue runs now under the gate's read side unless busy, returning
// its error; otherwise it queues later in *q (run by runQueue when the
// last such capture ends) and returns nil.
func (d *domain) nowOrQueue(busy func() bool, q *[]func(), now func() error, later func()) error {
	d.gate.RLock()
	defer d.gate.RUnlock()
	d.mu.Lock()
	if busy() {
		*q = append(*q, later)
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	return now()
}

// runAfterAll runs afterAll's queue unless a capture began meanwhile.
func (d *domain) runAfterAll() { d.runQueue(d.anyLocked, &d.afterAny) }

// nowOrAfter is nowOrAfterGlobal, or under strict safety its analogue
// for captures of any mode: fn runs now if none is active, else later
// runs when the last one ends.
func (d *domain) nowOrAfter(strict bool, now func() error, later func()) error {
	if !strict {
		return d.nowOrAfterGlobal(now, later)
	}
	return d.nowOrQueue(d.anyLocked, &d.afterAny, now, later)
}

// runDeferred runs the deferred work under the gate's read side, unless a
// Global-mode capture began again meanwhile: then it stays queued for the
// next time the count drops to zero.
func (d *domain) runDeferred() { d.runQueue(d.globalLocked, &d.deferred) }

// captureDomains is the domains' side of driver.DeviceWide and
// driver.AfterGlobalCaptures (their documentation is the contract),
// installed in internal/allochooks for alloc/driver, which cannot import
// this package.
type captureDomains struct{}

var _ allochooks.CaptureDomains = captureDomains{}

func init() { allochooks.Domains = captureDomains{} }

// DeviceWide runs fn under the read side of the gate of the domain named
// domainName, unless a Global-mode capture is active there: then fn is
// not called and the error wraps ErrCaptureIllegalOp.
func (captureDomains) DeviceWide(domainName, op string, fn func() error) error {
	d := domainFor(domainName)
	d.gate.RLock()
	defer d.gate.RUnlock()
	if n := d.global.Load(); n > 0 {
		return wrapf(driver.ErrCaptureIllegalOp, "%s: %d global-mode capture(s) active in capture domain %q; no driver call was made, retry after the capture ends", op, n, domainName)
	}
	return fn()
}

// AfterGlobalCaptures runs fn under the gate's read side of the domain
// named domainName now (reporting true) if no Global-mode capture is
// active there, else in a goroutine of its own when the last one ends.
func (captureDomains) AfterGlobalCaptures(domainName string, fn func()) (ranNow bool) {
	_ = domainFor(domainName).nowOrAfterGlobal(func() error {
		ranNow = true
		fn()
		return nil
	}, fn)
	return ranNow
}

// nowOrAfterGlobal runs now under the gate's read side if no Global-mode
// capture is active in d, returning its error; otherwise it queues later to
// run (under the gate too) when the last one ends, and returns nil.
func (d *domain) nowOrAfterGlobal(now func() error, later func()) error {
	return d.nowOrQueue(d.globalLocked, &d.deferred, now, later)
}

// globalElsewhere reports whether a Global-mode capture is active on a
// stream other than own.
func (d *domain) globalElsewhere(own driver.Stream) bool {
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
