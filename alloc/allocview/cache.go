package allocview

import (
	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/walkcache"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// snapshotCache keeps each allocator's snapshot for a second, one walk at a
// time in the process (alloc/internal/walkcache): however many clients
// poll, each allocator's lock is taken for a snapshot at most once a
// second, and the views may be that much behind.
var snapshotCache = walkcache.New((*alloc.Allocator).Snapshot)

// snapshotOf returns a's snapshot, at most a second old. Callers share it:
// they must not modify it.
func snapshotOf(a *alloc.Allocator) (memmap.Snapshot, error) { return snapshotCache.Get(a) }

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
