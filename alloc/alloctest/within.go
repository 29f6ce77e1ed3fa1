package alloctest

import (
	"testing"
	"time"
)

// ReturnsWithin runs fn and returns its error, or fails the test if fn
// has not returned after limit: a broken bound (a watchdog, a poll's
// hand-off) must fail the test, not hang it. what names the call in the
// failure. fn's goroutine is left behind on failure; the test's cleanup
// must unblock it.
func ReturnsWithin(tb testing.TB, limit time.Duration, what string, fn func() error) error {
	tb.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		tb.Fatalf("%s: still blocked after %v", what, limit)
		return nil
	}
}
