package cpu

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

// StreamPoll reports, without waiting, whether s has nothing left to do
// (driver.StreamPoller), making the progress a device makes by itself:
// a queued batch of memory operations (memsets, copies, frees, graphs of
// them) runs at once in the calling goroutine, since none of them can
// block; a batch holding a host function, which may block for as long as
// the engine's function likes, is left queued and answered with
// driver.ErrWouldBlock: the allocator's blocking call runs it. When idle it reports, and clears, the failure of work
// already run, as StreamSynchronize would. Same rules as StreamQuery.
//
// It is what lets the allocator bound a Synchronize by polling on its
// caller's goroutine instead of handing the wait to a watched one.
func (d *Driver) StreamPoll(h driver.Stream) (bool, error) {
	s, err := d.lockForQuery(h)
	if s == nil {
		return false, err
	}
	s.mu.Lock()
	q := s.queue
	if len(q) == 0 {
		err, s.err = s.err, nil
		s.mu.Unlock()
		s.execMu.Unlock()
		return true, err
	}
	if mayBlock(q) {
		s.mu.Unlock()
		s.execMu.Unlock()
		return false, driver.ErrWouldBlock // a blocking call runs it, in order
	}
	s.queue, s.spare = s.spare, nil
	s.mu.Unlock()
	defer s.execMu.Unlock()
	d.runBatch(s, q)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		return false, nil // enqueued meanwhile: the next poll runs it
	}
	err, s.err = s.err, nil
	return true, err
}

// mayBlock reports whether running q could wait on something outside the
// driver: a host function, or a graph with one among its nodes (known
// since its capture ended: a poll does not walk a replay's ops).
func mayBlock(q []op) bool {
	for i := range q {
		switch q[i].kind {
		case opHost:
			return true
		case opGraph:
			if q[i].exec.g.mayBlock {
				return true
			}
		}
	}
	return false
}

// chunksMayBlock is mayBlock over a capture's recorded ops.
func chunksMayBlock(c opChunks) bool {
	for _, ch := range c {
		if mayBlock(ch) {
			return true
		}
	}
	return false
}
