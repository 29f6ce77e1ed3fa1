package alloc

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// GraphPool is memory that graphs captured into it share
// (CaptureOptions.Pool), as PyTorch's graph pools
// (torch.cuda.graph(pool=...)): a capture into the pool takes its
// allocations from the pool, reusing memory that earlier captures into it
// freed, so graphs that never run at the same time cost about the largest
// one instead of the sum. docs/graph-pools.md states the rules; in short:
//
//   - memory a capture frees before it ends is the pool's again at once,
//     for the rest of that capture and for every later capture into it;
//   - memory a capture still holds when it ends (the graph's outputs) is
//     that graph's until Graph.Close: no other capture is given it;
//   - the pool's graphs run one at a time, in stream order: a pool belongs
//     to one allocator, a capture into another allocator's pool is refused,
//     and Graph.Launch is stream-ordered on the allocator's one stream;
//   - the pool's memory comes from the allocator's cache (no driver call in
//     the capture) and goes back to it only when the pool is closed and its
//     last graph is closed, in either order, so eager allocations never
//     receive memory a graph of the pool may still replay into.
//
// Its methods are safe for concurrent use.
type GraphPool struct {
	a    *Allocator
	id   int          // process-wide, never given twice (poolIDs)
	name string       // SetName
	stk  *stackRecord // where it was made: its memory's place in the profile (pprof.go)
	// arena is pool.go's geometry over the memory the pool borrowed: each
	// of its segments is one block of the allocator's pool (borrowed),
	// taken from its cache and not handed to anyone else until dispose.
	arena    pool
	borrowed []*block
	tails    map[*segment]*block // each arena segment's last borrowed block (extendLocked)
	users    int                 // live graphs of the pool and captures recording into it
	out      int                 // blocks out of the arena: handed out, or held by a reference
	closed   bool                // Close was called
	disposed bool                // its memory went back to the allocator's pool
}

// NewGraphPool makes an empty graph pool of a's. Close it when its graphs
// are no longer wanted: the memory goes back once both it and its last
// graph are closed.
func (a *Allocator) NewGraphPool() *GraphPool {
	var pcs [maxStack]uintptr
	n := runtime.Callers(1, pcs[:])
	gp := &GraphPool{a: a, id: int(poolIDs.Add(1)), tails: map[*segment]*block{}, stk: &stackRecord{pcs: slices.Clone(pcs[:n])}}
	// No upstream: the arena never grows or gives back by itself (pool.grow,
	// the reclaim ladder); borrowLocked and disposeLocked do.
	gp.arena.init(a, a.info.Alignment, a.info.TotalMemory, nil)
	a.mu.Lock()
	a.graphPools[gp] = struct{}{}
	a.mu.Unlock()
	return gp
}

// poolIDs numbers graph pools for the whole process, as graphIDs numbers
// graphs.
var poolIDs atomic.Int64

// SetName names the pool in views, metrics and messages: "decode" is
// shown as "decode (pool 3)". It may be called at any time.
func (gp *GraphPool) SetName(name string) {
	gp.a.mu.Lock()
	gp.name = name
	gp.a.mu.Unlock()
}

// Name is the pool's name (SetName), "" for none.
func (gp *GraphPool) Name() string {
	gp.a.mu.Lock()
	defer gp.a.mu.Unlock()
	return gp.name
}

// label is how messages name the pool. Caller holds a.mu.
func (gp *GraphPool) label() string {
	if gp.name == "" {
		return fmt.Sprintf("pool %d", gp.id)
	}
	return fmt.Sprintf("%q (pool %d)", gp.name, gp.id)
}

// BeginCapture is the allocator's BeginCapture into the pool, for engines
// that capture with BeginCapture and EndCapture rather than WithCapture
// (CaptureOptions.Pool): the capture's allocations share the pool's
// memory, and the allocator's EndCapture ends it as any capture. It is
// refused, as WithCapture into the pool is, when the pool is closed.
func (gp *GraphPool) BeginCapture(mode CaptureMode) error {
	_, err := beginCapture(gp.a, mode, gp, "")
	return err
}

// Bytes is the device memory the pool holds now: what its graphs share.
func (gp *GraphPool) Bytes() int64 {
	gp.a.mu.Lock()
	defer gp.a.mu.Unlock()
	var n int64
	for _, b := range gp.borrowed {
		n += b.class
	}
	return n
}

// Close closes the pool: no capture into it is accepted from now on, and
// its memory goes back to the allocator when its last graph is closed (at
// once if it has none).
func (gp *GraphPool) Close() error {
	a := gp.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if gp.closed {
		return a.fail("GraphPool.Close", -1, StateNone, wrapf(ErrClosed, "graph pool closed twice"))
	}
	gp.closed = true
	if h := a.stats.hist; h != nil {
		h.record(evPoolClose, driver.DevicePtr(gp.id), 0, eventTag{}, "")
	}
	gp.disposeIfDoneLocked()
	return nil
}

// joinLocked admits a capture of a's into the pool, or says why not. The
// refusal leaves everything as it was. Caller holds a.mu.
func (gp *GraphPool) joinLocked(a *Allocator) error {
	switch {
	case gp.a != a:
		// Its graphs would run on another stream than the pool's others,
		// possibly at the same time as them, over the same memory.
		return wrapf(ErrInvalidValue, "graph pool belongs to another allocator (%s %q): its graphs would run on another stream, possibly at the same time as that allocator's graphs of the pool", gp.a.backend, gp.a.name)
	case gp.closed:
		return wrapf(ErrClosed, "graph pool was closed")
	}
	gp.users++
	return nil
}

// leaveLocked ends a capture's or graph's membership. Caller holds a.mu.
func (gp *GraphPool) leaveLocked() {
	gp.users--
	gp.disposeIfDoneLocked()
}

// allocLocked serves an allocation of size bytes in capture c from the
// pool: a free block of its arena, else one borrowed from the allocator's
// cache. It reports false when neither has room. Caller holds a.mu.
func (gp *GraphPool) allocLocked(c *capture, size int64) (Buffer, bool) {
	a := gp.a
	n := gp.arena.round(size)
	b := gp.arena.get(n)
	if b == nil {
		if b = gp.borrowLocked(n); b == nil {
			return Buffer{}, false
		}
	}
	b.kind, b.cap = kindShared, c
	c.pooled = append(c.pooled, b)
	gp.out++
	c.allocs++
	a.stats.CaptureAllocs++
	return a.handOutLocked(b, size, 0), true
}

// borrowLocked moves memory of the allocator's cache into the pool and
// returns the arena's block of n bytes in it; nil when the cache has no
// room. No driver call: the cache's memory is the allocator's already, and
// every use of it, eager or replayed, is ordered on the allocator's one
// stream. It first extends a segment of the arena over the free block
// that follows it (extendLocked); else it takes a wholly free cached
// segment whole, when one of a large request's size is cached
// (takeWholeSegment: captures of growing size then find the room later
// ones need in the pool, where pieces of separate segments never
// merge); else a free block as a new segment, a segment's worth when one
// is cached, as pool.grow does, so later requests find room beside this
// one. Caller holds a.mu.
func (gp *GraphPool) borrowLocked(n int64) *block {
	a := gp.a
	a.lane.flushLocked() // the per-P caches' blocks too
	a.pool.mergeRecent() // so a free neighbour is seen as free
	if b := gp.extendLocked(n); b != nil {
		return b
	}
	if b := a.pool.takeWholeSegment(n); b != nil {
		return gp.adoptLocked(b, n)
	}
	for _, want := range [2]int64{segmentSize(n), n} {
		take := a.pool.get
		if n <= smallRequest && want > smallRequest { // a small segment out of a large block: its high end (pool_high.go)
			take = a.pool.takeHigh
		}
		if b := take(want); b != nil {
			return gp.adoptLocked(b, n)
		}
	}
	return nil
}

// adoptLocked makes b, a block taken out of the allocator's cache, a
// segment of the pool's arena and returns its first block cut to n
// bytes. Caller holds a.mu.
func (gp *GraphPool) adoptLocked(b *block, n int64) *block {
	b.kind = kindShared // the allocator's snapshot shows it as graphs' memory
	b.disarm()          // lent, not handed out
	gp.borrowed = append(gp.borrowed, b)
	blk := gp.arena.addSegment(b.ptr, b.class, n)
	gp.tails[blk.seg] = b
	return blk
}

// extendLocked grows a segment of the arena n's request goes to over the
// free block of the allocator's cache that follows it in the allocator's
// segment, by what n needs beyond the segment's free end, and returns the
// block of n bytes then cut from that end; nil when no segment can. Captures
// of growing size (smallest graph first) then grow one segment, as the
// allocator's cache held it, instead of borrowing pieces that never merge.
// Caller holds a.mu, the allocator's recent frees merged.
func (gp *GraphPool) extendLocked(n int64) *block {
	a := gp.a
	gp.arena.mergeRecent()
	for s := range gp.arena.arenaFor(n).segments() {
		tail := gp.tails[s]
		next := tail.segNext
		if next == nil || !next.free || next.kind != kindPooled || next.seg.exp != nil {
			continue
		}
		need := n
		if last := s.last(); last.free {
			need -= last.class
		}
		if next.class < need {
			continue
		}
		a.pool.claim(next.seg.ar, next, need)
		next.kind = kindShared
		next.disarm() // lent, not handed out
		gp.borrowed = append(gp.borrowed, next)
		gp.tails[s] = next
		gp.arena.appendFree(s, next.ptr, next.class)
		return gp.arena.get(n)
	}
	return nil
}

// releaseLocked takes back b, a block of the pool's arena that nothing
// uses any more: freed in its capture, or its graph closed and no
// reference left. Caller holds a.mu.
func (gp *GraphPool) releaseLocked(b *block) {
	b.kind, b.cap = kindPooled, nil
	if gp.disposed { // Close gave the memory back already (a graph's destruction it deferred)
		return
	}
	gp.arena.put(b)
	gp.out--
	gp.disposeIfDoneLocked()
}

// disposeIfDoneLocked gives the pool's memory back to the allocator's
// cache once nothing can use it again: the pool closed, no graph or
// capture of it alive, no block of it out. Caller holds a.mu.
func (gp *GraphPool) disposeIfDoneLocked() {
	if gp.closed && gp.users == 0 && gp.out == 0 {
		gp.disposeLocked()
	}
}

// disposeLocked gives the borrowed blocks back to the allocator's pool
// and forgets the pool. Caller holds a.mu.
func (gp *GraphPool) disposeLocked() {
	a := gp.a
	if gp.disposed {
		return
	}
	gp.disposed, gp.closed = true, true
	for _, b := range gp.borrowed {
		b.kind = kindPooled
		a.pool.put(b)
	}
	gp.borrowed, gp.tails = nil, nil
	gp.arena = pool{}
	delete(a.graphPools, gp)
}
