package alloc

import (
	"testing"
	"time"
)

// gateHang bounds the waits of the gate's tests: a broken gate fails the
// test instead of hanging it. No outcome depends on it.
const gateHang = time.Minute

// waitersOf is g's count of registered exclusive waiters.
func waitersOf(g *gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// untilWaiting returns once a Lock on g has registered as waiting.
func untilWaiting(t *testing.T, g *gate) {
	t.Helper()
	deadline := time.Now().Add(gateHang)
	for waitersOf(g) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the exclusive side never registered as waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// received waits for ch, failing the test after gateHang.
func received[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(gateHang):
		t.Fatalf("%s: still waiting after %v", what, gateHang)
		panic("unreachable")
	}
}

// A capture begin waiting at the gate holds new unsafe calls back: it
// waits for the calls in flight when it asked, never for later ones, so
// busy goroutines looping unsafe calls cannot starve it however slow
// each call is. The held-back call goes once the begin is done.
func TestGateWaitingBeginHoldsNewCallsBack(t *testing.T) {
	var g gate
	g.RLock() // an unsafe call in flight
	locked := make(chan bool, 1)
	go func() { locked <- g.Lock(0) }()
	untilWaiting(t, &g)

	if g.TryRLock() {
		t.Fatal("TryRLock got the shared side while a begin waits")
	}
	entered := make(chan struct{})
	go func() {
		g.RLock()
		close(entered)
		g.RUnlock()
	}()
	g.RUnlock() // the call in flight ends: the begin's turn, not the new call's
	if !received(t, locked, "Lock once the call in flight ended") {
		t.Fatal("Lock(0) gave up")
	}
	select {
	case <-entered:
		t.Fatal("a call that asked after the begin got the shared side before it")
	default:
	}
	g.Unlock()
	received(t, entered, "the held-back call after the begin")
}

// A begin that gives up at its deadline (an unsafe call hung in the
// driver) reports so and lets the calls it held back through, while the
// hung one still holds the shared side. The deadline's length changes
// when, not what.
func TestGateBeginGivingUpReleasesHeldBackCalls(t *testing.T) {
	var g gate
	g.RLock() // hung
	defer g.RUnlock()
	locked := make(chan bool, 1)
	go func() { locked <- g.Lock(50 * time.Millisecond) }()
	entered := make(chan struct{})
	go func() {
		g.RLock()
		close(entered)
		g.RUnlock()
	}()
	if received(t, locked, "Lock with a deadline") {
		t.Fatal("Lock got the gate while a call holds the shared side")
	}
	received(t, entered, "the held-back call once the begin gave up")
	if !g.TryRLock() {
		t.Fatal("TryRLock refused with no begin waiting")
	}
	g.RUnlock()
}
