package alloc

import (
	"errors"
	"fmt"
)

// Close releases everything the allocator holds and destroys its stream. A
// capture still open is aborted. Buffers, host buffers and graphs still
// alive are released too, and reported in an error wrapping ErrLeaked. The
// driver stays open: it belongs to the caller.
func (a *Allocator) Close() error {
	a.mu.Lock()
	a.awaitTransitionLocked()
	if a.closed {
		a.mu.Unlock()
		return a.fail("Close", -1, StateNone, wrapf(ErrClosed, "allocator closed twice"))
	}
	var errs, leaks []error
	if c := a.cap; c != nil {
		leaks = append(leaks, errors.New("an open capture was aborted"))
		if !c.abandoned { // an abandoned one ends when its call returns
			if g, err := a.endLocked(c, a.watchdog.timeout); g != nil {
				a.closeGraphLocked(g) // aborted: its graph is not wanted
			} else if err != nil && !errors.Is(err, ErrCaptureInvalidated) {
				errs = append(errs, err)
			}
		}
	}
	if n := len(a.graphs); n > 0 {
		leaks = append(leaks, fmt.Errorf("%d graph(s) not closed", n))
		for g := range a.graphs {
			a.closeGraphLocked(g)
		}
	}
	a.closed = true
	unregister(a)
	var bytes int64
	n := 0
	for b := a.live.head; b != nil; b = a.live.head {
		if b.ws == "" {
			n++
			bytes += b.size
		}
		a.retireLocked(b)
		a.releaseLocked(b)
	}
	if n > 0 {
		leaks = append(leaks, fmt.Errorf("%d buffer(s) of %d B not freed", n, bytes))
	}
	a.workspaces = map[string]*block{}
	if _, err := a.releaseCacheLocked(); err != nil {
		errs = append(errs, err)
	}
	hosts := make([]*HostBuffer, 0, len(a.hosts))
	for h := range a.hosts {
		hosts = append(hosts, h)
	}
	if len(hosts) > 0 {
		leaks = append(leaks, fmt.Errorf("%d host buffer(s) of %d B not closed", len(hosts), a.stats.HostBytes))
	}
	a.hosts = map[*HostBuffer]struct{}{}
	a.stats.HostBuffers, a.stats.HostBytes = 0, 0
	syncFrees := a.pending
	a.pending = nil
	a.mu.Unlock()

	// The unsafe rest (synchronous frees, pinned host frees, the stream's
	// last synchronize) runs now if no Global-mode capture forbids it, or
	// once the last one ends: never into another allocator's capture.
	if err := a.cleanup("Close", func() error {
		var errs []error
		for _, b := range syncFrees {
			errs = append(errs, a.drv.Free(b.ptr))
		}
		for _, h := range hosts {
			if h.closed.CompareAndSwap(false, true) {
				errs = append(errs, a.drv.HostFree(h.b))
			}
		}
		errs = append(errs, a.drv.StreamSynchronize(a.stream), a.drv.DestroyStream(a.stream))
		return errors.Join(errs...)
	}); err != nil {
		errs = append(errs, err)
	}
	if len(leaks) > 0 {
		errs = append([]error{fmt.Errorf("%w: %w", ErrLeaked, errors.Join(leaks...))}, errs...)
	}
	if len(errs) > 0 {
		return a.fail("Close", -1, StateNone, errors.Join(errs...))
	}
	return nil
}
