package alloctest

import (
	"sync"
	"testing"
)

// LoopUntilStopped runs body over and over on n goroutines (i counts a
// goroutine's rounds) until body returns false or stop is called; stop
// waits for them to end, and the test's cleanup calls it if the test has
// not, so a failed test leaves nothing running. body reports its own
// failures (t.Error, assert): it runs off the test's goroutine.
func LoopUntilStopped(tb testing.TB, n int, body func(i int) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if !body(i) {
					return
				}
			}
		}()
	}
	var once sync.Once
	stop = func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
	tb.Cleanup(stop)
	return stop
}
