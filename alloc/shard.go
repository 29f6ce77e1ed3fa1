package alloc

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The lock-free lane: the common Alloc and Free (a pool hit of a size the
// goroutine freed before, a free outside any capture) are served from a
// cache of free blocks per P, under that cache's own lock, without a.mu,
// so goroutines sharing an allocator do not queue behind each other. What
// the lane may not decide alone goes to the locked path (a.mu), which
// can take a shard's lock too (a.mu, then one shard, in index order when
// several: the lane never takes a.mu while it holds a shard's lock).
//
// Why it stays sound (docs/allocator-core.md, "The lock-free lane"):
//   - the lane serves only while laneOff is 0, read under the shard's
//     lock; everything that must not meet a lane call (a capture, an eager
//     run, a memory walk, Close) raises laneOff under a.mu and then takes
//     and drops every shard's lock (closeLaneLocked), so no lane call is
//     in flight when it goes on and none starts until it is done. Close
//     never reopens it, so the stream a lane call asks about is alive;
//   - a capture the allocator did not start is seen as the locked path
//     sees it: the lane asks the driver and steps aside unless it is none;
//   - a block's hand-out and retirement are atomic steps of block.state, a
//     retirement a compare-and-swap from the Buffer's value: of two
//     racing frees, one wins and the other is refused as a double free;
//   - a call queued on the stream that races a lane Free of its buffer
//     (Memset, a copy, Enqueue) was validated and queued under a.mu; the
//     block's next owner queues its own work under a.mu too, so after it
//     on the one stream, as for any reuse (pool.go): a racing call lands
//     before the next owner's first use, never after;
//   - memory that a blocking call uses without a.mu (a pinned pageable
//     copy) or a live graph's work uses has block.refs above 0, raised
//     under a.mu before the buffer is validated again. A lane Free
//     retires the block, then reads refs; by sequential consistency
//     either the call sees the retirement (and fails, ErrInvalidBuffer)
//     or the Free sees the reference and leaves the block held, for the
//     last reference to release (release.go). No memory is reused, or
//     given back to the driver, under such a call;
//   - the lane reads a block's profile sample (block.prof) without a.mu,
//     atomically: it is set under a.mu before the Buffer is handed out and
//     cleared only after the block is retired, so a Free holding the
//     Buffer sees it, and one that sees it cleared fails its
//     compare-and-swap as a stale handle.

const (
	// shardBlocks is how many free blocks a shard caches, the pool's
	// recent list for one P: enough for an engine's loop of a few sizes.
	shardBlocks = 8
	// shardSlack bounds the bytes a shard may free without publishing them
	// to a.inUse, so a loop of pairs makes no shared write (see owed).
	shardSlack = 1 << 20
	// maxShards bounds the shards of an allocator; Ps past it share.
	maxShards = 64
)

// shard is one P's cache of free pooled blocks and its share of the
// counters, padded so two shards never share a cache line.
type shard struct {
	mu     sync.Mutex
	blocks [shardBlocks]*block // free, not in the pool; oldest first
	n      int
	// dirty is set when a block is cached or a free is owed, and cleared
	// by a flush only (not when the lane takes the last block: a loop of
	// pairs stores nothing), so flushShardsLocked skips a shard without
	// its lock only when it has nothing to flush.
	dirty  atomic.Bool
	cached int64 // bytes in blocks

	// owed is the change of bytes in use made here and not yet added to
	// a.inUse: never above 0 (an allocation that would raise it publishes
	// it all), never below -shardSlack. So a.inUse is never below the
	// truth, its peak never misses one, and with one shard in use it is
	// exact; Stats adds every owed back.
	owed   int64
	allocs uint64
	frees  uint64
	live   int // buffers handed out here less those retired here
	_      [64]byte
}

func newShards() []shard {
	n := 1
	for n < runtime.GOMAXPROCS(0) && n < maxShards {
		n <<= 1
	}
	return make([]shard, n)
}

// shard is the calling goroutine's P's shard.
func (a *Allocator) shard() *shard {
	p := procPin()
	procUnpin()
	return &a.shards[p&(len(a.shards)-1)]
}

// laneOpen reports, with a shard's lock held, whether the lane may serve
// a call now: nothing holds it closed and no capture is on the stream.
func (a *Allocator) laneOpen() bool {
	if a.laneOff.Load() != 0 {
		return false
	}
	st, err := a.drv.StreamCaptureStatus(a.stream)
	return err == nil && st == driver.CaptureNone
}

// laneAlloc serves Alloc from the caller's shard: ok is false, and nothing
// changed, unless the lane is open and the shard has a free block of the
// request's rounded size.
func (a *Allocator) laneAlloc(size int64) (buf Buffer, ok bool) {
	if profileRate.Load() != 0 || size > a.info.TotalMemory {
		return Buffer{}, false // sampled or refused: the locked path's
	}
	n := a.pool.round(size)
	s := a.shard()
	if !s.dirty.Load() {
		return Buffer{}, false // nothing cached since the last flush
	}
	s.mu.Lock()
	i := s.n - 1 // the latest first: still hot in caches
	for ; i >= 0 && s.blocks[i].class != n; i-- {
	}
	if i < 0 || !a.laneOpen() {
		s.mu.Unlock()
		return Buffer{}, false
	}
	b := s.blocks[i]
	copy(s.blocks[i:], s.blocks[i+1:s.n])
	s.n--
	s.blocks[s.n] = nil
	s.cached -= n
	b.size = size
	gen := b.state.Add(1) // odd: live
	s.allocs++
	s.live++
	if s.owed += size; s.owed > 0 {
		a.inUse.add(s.owed)
		s.owed = 0
	}
	buf = Buffer{blk: b, gen: gen, ptr: b.ptr, size: size} // before the unlock: a Close may recycle b right after
	s.mu.Unlock()
	return buf, true
}

// laneFree serves Free of a pooled buffer into the caller's shard: it
// reports false, and nothing changed, when the locked path must decide
// (a view, a workspace, a sampled or referenced block, a stale handle, a
// full shard, the lane closed). A reference that raced in after the
// retirement leaves the block held for it.
func (a *Allocator) laneFree(b Buffer) bool {
	blk := b.blk
	if blk == nil || blk.a != a || b.view || !blk.validFor(b.gen) ||
		blk.kind != kindPooled || blk.ws != "" || blk.prof.Load() != nil || blk.refs.Load() != 0 {
		return false
	}
	s := a.shard()
	s.mu.Lock()
	if s.n == shardBlocks || !a.laneOpen() || !blk.state.CompareAndSwap(b.gen, b.gen+1) {
		s.mu.Unlock()
		return false
	}
	s.frees++
	s.live--
	if s.owed -= blk.size; s.owed < -shardSlack {
		a.inUse.add(s.owed)
		s.owed = 0
	}
	if blk.refs.Load() != 0 { // a reference raced in: see release.go
		blk.held.Store(true)
		if blk.refs.Load() != 0 || !blk.held.CompareAndSwap(true, false) {
			s.markDirty() // the owed free
			s.mu.Unlock()
			return true
		}
	}
	s.push(blk)
	s.mu.Unlock()
	return true
}

// push caches b, with room for it. Caller holds s.mu.
func (s *shard) push(b *block) {
	s.markDirty()
	s.blocks[s.n] = b
	s.n++
	s.cached += b.class
}

// cacheLocked takes a freed pooled block for reuse: into the caller's
// shard while the lane is open (its oldest block moving to the pool when
// it is full), else into the pool. Caller holds a.mu.
func (a *Allocator) cacheLocked(b *block) {
	if a.laneOff.Load() != 0 {
		a.pool.put(b)
		return
	}
	s := a.shard()
	s.mu.Lock()
	if s.n == shardBlocks {
		old := s.blocks[0]
		copy(s.blocks[:], s.blocks[1:])
		s.n--
		s.cached -= old.class
		a.pool.put(old)
	}
	s.push(b)
	s.mu.Unlock()
}

func (s *shard) markDirty() {
	if !s.dirty.Load() {
		s.dirty.Store(true)
	}
}

// flushLocked moves s's blocks to the pool, where best fit and merging
// see them, and publishes what s owes to a.inUse (so an allocation made
// next under a.mu raises the peak from the exact figure). Caller holds
// a.mu.
func (a *Allocator) flushLocked(s *shard) {
	if !s.dirty.Load() {
		return
	}
	s.mu.Lock()
	for i, b := range s.blocks[:s.n] {
		a.pool.put(b)
		s.blocks[i] = nil
	}
	s.n, s.cached = 0, 0
	a.inUse.add(s.owed)
	s.owed = 0
	s.dirty.Store(false)
	s.mu.Unlock()
}

// flushShardsLocked flushes every shard. Caller holds a.mu.
func (a *Allocator) flushShardsLocked() {
	for i := range a.shards {
		a.flushLocked(&a.shards[i])
	}
}

// closeLaneLocked closes the lane and waits until no lane call is in
// flight; openLaneLocked undoes one closeLaneLocked. Caller holds a.mu.
func (a *Allocator) closeLaneLocked() {
	if a.laneOff.Add(1) != 1 {
		return // closed already, and drained when it was
	}
	for i := range a.shards {
		a.shards[i].mu.Lock()
		//lint:ignore SA2001 an empty critical section: waiting for the lane call that holds it is the point
		a.shards[i].mu.Unlock()
	}
}

func (a *Allocator) openLaneLocked() { a.laneOff.Add(-1) }

// addShardStatsLocked adds the shards' counters to s, and sets the bytes
// in use and their peak, with every shard locked at once so the sums are
// of one moment: the lane changes a.inUse only under a shard's lock, the
// locked path only under a.mu. Caller holds a.mu.
func (a *Allocator) addShardStatsLocked(s *Stats) {
	for i := range a.shards {
		a.shards[i].mu.Lock()
	}
	s.BytesInUse, s.PeakInUse = a.inUse.cur.Load(), a.inUse.peak.Load()
	for i := range a.shards {
		sh := &a.shards[i]
		s.BytesInUse += sh.owed
		s.BytesCached += sh.cached
		s.LiveBuffers += sh.live
		s.Allocs += sh.allocs
		s.PoolHits += sh.allocs
		s.Frees += sh.frees
	}
	for i := range a.shards {
		a.shards[i].mu.Unlock()
	}
}
