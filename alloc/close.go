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
	if a.closed {
		a.mu.Unlock()
		return a.fail("Close", -1, StateNone, wrapf(ErrClosed, "allocator closed twice"))
	}
	var errs, leaks []error
	var syncFrees []*block
	if c := a.cap; c != nil {
		_, sf, _ := a.endCaptureLocked(c) // aborted: its graph is not wanted
		syncFrees = append(syncFrees, sf...)
		for g := range a.graphs {
			if g.cap == c {
				syncFrees = append(syncFrees, a.closeGraphLocked(g)...)
			}
		}
		leaks = append(leaks, errors.New("an open capture was aborted"))
	}
	if n := len(a.graphs); n > 0 {
		leaks = append(leaks, fmt.Errorf("%d graph(s) not closed", n))
		for g := range a.graphs {
			syncFrees = append(syncFrees, a.closeGraphLocked(g)...)
		}
	}
	a.closed = true
	var bytes int64
	n := 0
	for b := a.live.head; b != nil; b = a.live.head {
		if b.ws == "" {
			n++
			bytes += b.size
		}
		a.retireLocked(b)
		switch b.kind {
		case kindPooled:
			a.pool.put(b)
		case kindSync:
			syncFrees = append(syncFrees, b)
		}
	}
	if n > 0 {
		leaks = append(leaks, fmt.Errorf("%d buffer(s) of %d B not freed", n, bytes))
	}
	a.workspaces = map[string]*block{}
	if err := a.releaseCacheLocked(); err != nil {
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
	for _, b := range syncFrees {
		a.stats.DriverFrees++
		a.stats.BytesReserved -= b.class
	}
	a.mu.Unlock()

	for _, b := range syncFrees {
		if err := a.drv.Free(b.ptr); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range hosts {
		if h.closed.CompareAndSwap(false, true) {
			if err := a.drv.HostFree(h.b); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := a.watchdog.call("Close", func() error { return a.drv.StreamSynchronize(a.stream) }); err != nil {
		errs = append(errs, err)
	}
	if err := a.drv.DestroyStream(a.stream); err != nil {
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
