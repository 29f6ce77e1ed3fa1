// Package osthread runs functions one at a time on one locked OS thread:
// the GPU runtimes (CUDA, HIP) keep per-thread state (the current device,
// the thread that began a capture) that Go's goroutines, which migrate
// between threads, cannot hold. The cuda and hip drivers keep one for
// device calls and one for capture begin and end
// (internal/gpurt/thread.go says why).
package osthread

import (
	"errors"
	"runtime"
	"sync"
)

// ErrStopped is Do's error once the thread is stopped.
var ErrStopped = errors.New("osthread: stopped")

// Thread is one locked OS thread running submitted functions in order.
type Thread struct {
	jobs chan func()
	quit chan struct{}
	once sync.Once
}

// Start locks a new goroutine to its thread and runs init there first;
// init's error stops the thread.
func Start(init func() error) (*Thread, error) {
	t := &Thread{jobs: make(chan func()), quit: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: when the goroutine returns the thread exits with
		// it, taking the runtime's thread state along.
		runtime.LockOSThread()
		if err := init(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for {
			select {
			case f := <-t.jobs:
				f()
			case <-t.quit:
				return
			}
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return t, nil
}

// Do runs f on the thread and returns its error, or ErrStopped once the
// thread is stopped.
func (t *Thread) Do(f func() error) error {
	done := make(chan error, 1)
	select {
	case t.jobs <- func() { done <- f() }:
		return <-done
	case <-t.quit:
		return ErrStopped
	}
}

// Stop ends the thread after the job in progress, if any.
func (t *Thread) Stop() { t.once.Do(func() { close(t.quit) }) }
