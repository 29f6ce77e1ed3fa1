package allocview

import (
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// A snapshot walks every block under the allocator's lock (about a
// millisecond per 10,000 blocks), so the views bound what requests can
// cost the engine: one walk at a time in the process, and a walk serves
// every request for the same allocator for snapshotTTL. However many
// clients poll, each allocator's lock is taken for a walk at most once per
// snapshotTTL; views may be that much behind.
var snapshotTTL = time.Second

var cache struct {
	mu    sync.Mutex // held across a walk: one at a time
	snaps map[*alloc.Allocator]cachedSnapshot
}

type cachedSnapshot struct {
	s  memmap.Snapshot
	at time.Time
}

// snapshotOf returns a's snapshot, at most snapshotTTL old. Callers share
// it: they must not modify it.
func snapshotOf(a *alloc.Allocator) (memmap.Snapshot, error) {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	now := time.Now()
	for k, c := range cache.snaps { // drop the stale, closed allocators' included
		if now.Sub(c.at) >= snapshotTTL {
			delete(cache.snaps, k)
		}
	}
	if c, ok := cache.snaps[a]; ok {
		return c.s, nil
	}
	s, err := a.Snapshot()
	if err != nil {
		return s, err
	}
	if cache.snaps == nil {
		cache.snaps = map[*alloc.Allocator]cachedSnapshot{}
	}
	cache.snaps[a] = cachedSnapshot{s, time.Now()}
	return s, nil
}

// DefaultMaxBlocks is how many blocks snapshot.json lists unless the
// request's ?max_blocks= says otherwise.
const DefaultMaxBlocks = 10000

// limitBlocks returns snaps listing at most max blocks in all: segments
// past the limit are left out, and the segment that reaches it lists its
// first blocks only (the counters and Bytes still cover everything). It
// reports the blocks listed and the blocks there are; snaps is not
// modified.
func limitBlocks(snaps []memmap.Snapshot, max int) (out []memmap.Snapshot, listed, total int) {
	for _, s := range snaps {
		for _, seg := range s.Segments {
			total += len(seg.Blocks)
		}
	}
	if total <= max {
		return snaps, total, total
	}
	out = make([]memmap.Snapshot, len(snaps))
	for i, s := range snaps {
		segs := make([]memmap.Segment, 0, len(s.Segments))
		for _, seg := range s.Segments {
			if listed >= max {
				break
			}
			if n := max - listed; len(seg.Blocks) > n {
				seg.Blocks = seg.Blocks[:n:n]
			}
			listed += len(seg.Blocks)
			segs = append(segs, seg)
		}
		s.Segments = segs
		out[i] = s
	}
	return out, listed, total
}
