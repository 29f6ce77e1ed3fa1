package alloc

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// The lane: the common Alloc and Free (a pool hit of a size the goroutine
// freed before, a free outside any capture) are served from a cache of
// free blocks per P, under that cache's own lock (a shard's mutex, taken
// on every lane call), without a.mu, so goroutines sharing an allocator do
// not queue behind one lock. What the lane may not decide alone goes to
// the locked path (a.mu), which can take a shard's lock too (a.mu, then
// one shard, in index order when several: the lane never takes a.mu while
// it holds a shard's lock).
//
// Why it stays sound (docs/allocator-core.md, "The per-P lane"):
//   - the lane serves only while off is 0, read under the shard's lock;
//     everything that must not meet a lane call (a capture, an eager run,
//     a memory walk, Close) raises off under a.mu and then takes and drops
//     every shard's lock (closeLocked), so no lane call is in flight when
//     it goes on and none starts until it is done. Close never reopens it,
//     so the stream a lane call asks about is alive;
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
	// to the bytes in use, so a loop of pairs makes no shared write (see
	// owed).
	shardSlack = 1 << 20
	// maxShards bounds the shards of an allocator; Ps past it share.
	maxShards = 64
)

// lane is the allocator's per-P caches of free pooled blocks (the
// comment above) and what a lane call needs of the allocator, copied at
// New so that a call reads nothing else of it.
type lane struct {
	shards []shard
	// off counts what holds the lane closed (a capture, an eager run, a
	// walk, Close); changed under a.mu only, read under a shard's lock.
	off atomic.Int32
	// used is set, once, when a lane Free first caches a block or owes a
	// free (setHint): until then no shard holds anything, and a locked
	// allocation skips the flush without looking at the shards (a fresh
	// allocator's first allocations). Never cleared: a flag a flush
	// cleared would cost two locked stores a flush.
	used atomic.Bool

	owner   *Allocator // the blocks' allocator: a lane Free of another's buffer steps aside
	drv     driver.Driver
	stream  driver.Stream
	pool    *pool  // where flushed and overflowing blocks go (under a.mu)
	maxSize int64  // the device's memory: a larger request is the locked path's to refuse
	granule int64  // the pool's request rounding (pool.granule)
	inUse   *meter // a.stats.inUse: the lane publishes what its shards owe into it
}

// shard is one P's cache of free pooled blocks and its share of the
// counters, padded so two shards never share a cache line.
type shard struct {
	mu     sync.Mutex
	blocks [shardBlocks]*block // free, not in the pool; oldest first
	n      int
	// hint has a bit (classBit) set for every size class cached since the
	// last flush, and bit 0 (owedBit) when a free is owed, so a lane
	// Alloc that would miss steps aside without the lock, and a flush
	// skips a shard without its lock only when it has nothing to flush.
	// Written under mu, read without it; bits are set, and cleared by a
	// flush only (not when the lane takes the last block: a loop of pairs
	// stores nothing).
	hint   atomic.Uint64
	cached int64 // bytes in blocks

	// owed is the change of bytes in use made here and not yet added to
	// the allocator's meter: never above 0 (an allocation that would raise
	// it publishes it all), never below -shardSlack. So the meter is
	// never below the truth, its peak never misses one, and with one shard
	// in use it is exact; Stats adds every owed back.
	owed   int64
	allocs uint64
	frees  uint64
	live   int // buffers handed out here less those retired here
	_      [64]byte
}

// init sets the lane up for a, with a shard per P (up to maxShards).
func (l *lane) init(a *Allocator) {
	n := 1
	for n < runtime.GOMAXPROCS(0) && n < maxShards {
		n <<= 1
	}
	l.shards = make([]shard, n)
	l.owner, l.drv, l.stream = a, a.drv, a.stream
	l.pool, l.maxSize, l.inUse = &a.pool, a.info.TotalMemory, &a.stats.inUse
	l.granule = a.pool.granule
}

// classBit is the bit of size class n in the classes hints: one of bits
// 1 to 63 (bit 0 is owedBit).
func classBit(n int64) uint64 {
	h := uint64(n) * 0x9E3779B97F4A7C15 >> 58 // 0 to 63
	return 2 << (h * 63 >> 6)                 // a shift, not a division
}

// owedBit in shard.hint: a lane Free left a free owed to the bytes in use
// (a referenced block's, held, not cached).
const owedBit = 1

// shard is the calling goroutine's P's shard.
func (l *lane) shard() *shard {
	if len(l.shards) == 1 {
		return &l.shards[0] // one P at New: no need to ask which
	}
	return l.pShard()
}

func (l *lane) pShard() *shard {
	p := procPin()
	procUnpin()
	return &l.shards[p&(len(l.shards)-1)]
}

// round is the pool's rounding (pool.round), from the lane's copy of the
// granule.
func (l *lane) round(n int64) int64 { return (n + l.granule - 1) &^ (l.granule - 1) }

// open reports, with a shard's lock held, whether the lane may serve a
// call now: nothing holds it closed and no capture is on the stream.
func (l *lane) open() bool {
	if l.off.Load() != 0 {
		return false
	}
	st, err := l.drv.StreamCaptureStatus(l.stream)
	return err == nil && st == driver.CaptureNone
}

// cached is the caller's shard when it may hold a free block for a
// request of size bytes, else nil: the request is the locked path's (no
// block of its rounded size cached there since the last flush, larger
// than the device, or sampled). Kept apart from alloc, whose frame (a
// Buffer to clear, a lock) a miss, common in a trace of sizes that rarely
// repeat, does not need.
func (l *lane) cached(size int64) *shard {
	s := &l.shards[0]
	if len(l.shards) != 1 {
		s = l.pShard()
	}
	if s.hint.Load()&classBit(l.round(size)) == 0 || size > l.maxSize || profileRate.Load() != 0 {
		return nil
	}
	return s
}

// alloc serves Alloc from s, the caller's shard (from cached): ok is
// false, and nothing changed, unless the lane is open and the shard has a
// free block of the request's rounded size.
func (l *lane) alloc(s *shard, size int64) (buf Buffer, ok bool) {
	n := l.round(size)
	s.mu.Lock()
	i := s.n - 1 // the latest first: still hot in caches
	for ; i >= 0 && s.blocks[i].class != n; i-- {
	}
	if i < 0 || !l.open() {
		s.mu.Unlock()
		return Buffer{}, false
	}
	b := s.blocks[i]
	if s.n--; i < s.n {
		copy(s.blocks[i:], s.blocks[i+1:s.n+1])
	}
	s.blocks[s.n] = nil
	s.cached -= n
	b.size = size
	b.cached = false
	gen := b.handOut() // armed by the lane's Free, or made odd
	s.allocs++
	s.live++
	if s.owed += size; s.owed > 0 {
		l.inUse.add(s.owed)
		s.owed = 0
	}
	buf = Buffer{blk: b, gen: gen, ptr: b.ptr, size: size} // before the unlock: a Close may recycle b right after
	if h := l.owner.stats.hist; h != nil {
		h.record(evAlloc, b.ptr, size, tagLive, "")
	}
	s.mu.Unlock()
	return buf, true
}

// free serves Free of a pooled buffer into the caller's shard: it reports
// false, and nothing changed, when the locked path must decide (a view, a
// workspace, a sampled or referenced block, a stale handle, a full shard,
// the lane closed). A reference that raced in after the retirement leaves
// the block held for it.
func (l *lane) free(b Buffer) bool {
	blk := b.blk
	if blk == nil || blk.a != l.owner || b.isView() || !blk.validFor(b.gen) ||
		blk.kind != kindPooled || blk.ws != "" || blk.prof.Load() != nil || blk.refs.Load() != 0 {
		return false
	}
	s := l.shard()
	s.mu.Lock()
	// Retired and armed in one step: the next hand-out's generation, odd,
	// never handed out (block.state).
	if s.n == shardBlocks || !l.open() || !blk.state.CompareAndSwap(b.gen, b.gen+2) {
		s.mu.Unlock()
		return false
	}
	s.frees++
	s.live--
	if h := l.owner.stats.hist; h != nil {
		h.record(evFree, blk.ptr, blk.size, tagLive, "")
	}
	if s.owed -= blk.size; s.owed < -shardSlack {
		l.inUse.add(s.owed)
		s.owed = 0
	}
	if blk.refs.Load() != 0 { // a reference raced in: see release.go
		blk.state.Add(1) // held, not free: even, as a retirement leaves it
		blk.held.Store(true)
		if blk.refs.Load() != 0 || !blk.held.CompareAndSwap(true, false) {
			l.setHint(s, owedBit) // the owed free
			s.mu.Unlock()
			return true
		}
	}
	l.push(s, blk)
	s.mu.Unlock()
	return true
}

// push caches b in s, with room for it. Caller holds s.mu.
func (l *lane) push(s *shard, b *block) {
	l.setHint(s, classBit(b.class))
	b.cached = true
	s.blocks[s.n] = b
	s.n++
	s.cached += b.class
}

// setHint sets bit in s.hint, storing only when it was clear (a store is
// a locked instruction), and marks the lane used. Caller holds s.mu.
func (l *lane) setHint(s *shard, bit uint64) {
	if h := s.hint.Load(); h&bit == 0 {
		s.hint.Store(h | bit)
		if !l.used.Load() {
			l.used.Store(true)
		}
	}
}

// cacheLocked takes a freed pooled block for reuse: into the caller's
// shard while the lane is open (its oldest block moving to the pool when
// it is full), else into the pool. Caller holds a.mu.
func (l *lane) cacheLocked(b *block) {
	if l.off.Load() != 0 {
		l.pool.put(b)
		return
	}
	s := l.shard()
	s.mu.Lock()
	if s.n == shardBlocks {
		old := s.blocks[0]
		copy(s.blocks[:], s.blocks[1:])
		s.n--
		s.cached -= old.class
		l.pool.put(old)
	}
	l.push(s, b)
	s.mu.Unlock()
}

// flushShardLocked moves s's blocks to the pool, where best fit and
// merging see them, and returns what s owed to the bytes in use, now the
// caller's to publish. Caller holds a.mu.
func (l *lane) flushShardLocked(s *shard) (owed int64) {
	s.mu.Lock()
	for i, b := range s.blocks[:s.n] {
		l.pool.put(b)
		s.blocks[i] = nil
	}
	s.n, s.cached = 0, 0
	owed, s.owed = s.owed, 0
	s.hint.Store(0)
	s.mu.Unlock()
	return owed
}

// flushLocked flushes every shard and publishes what they owed to the
// bytes in use (so an allocation made next under a.mu raises the peak
// from the exact figure). Caller holds a.mu.
func (l *lane) flushLocked() {
	if owed := l.flushOwedLocked(); owed != 0 {
		l.inUse.add(owed)
	}
}

// flushOwedLocked flushes every shard and returns what they owed to the
// bytes in use, not yet published: never above 0, so the caller may add it
// with its own change in one step (an allocation's), the peak the same as
// when added first. Until then the meter is above the truth, never below.
// A shard with a clear hint holds no block and owes nothing: it is skipped
// without its lock. Caller holds a.mu.
func (l *lane) flushOwedLocked() (owed int64) {
	for i := range l.shards {
		if s := &l.shards[i]; s.hint.Load() != 0 {
			owed += l.flushShardLocked(s)
		}
	}
	return owed
}

// closeLocked closes the lane and waits until no lane call is in flight;
// openLocked undoes one closeLocked. Caller holds a.mu.
func (l *lane) closeLocked() {
	if l.off.Add(1) != 1 {
		return // closed already, and drained when it was
	}
	for i := range l.shards {
		l.shards[i].mu.Lock()
		//lint:ignore SA2001 an empty critical section: waiting for the lane call that holds it is the point
		l.shards[i].mu.Unlock()
	}
}

func (l *lane) openLocked() { l.off.Add(-1) }

// addStatsLocked adds the shards' counters to s, and sets the bytes in use
// and their peak from inUse, with every shard locked at once so the sums
// are of one moment: the lane changes inUse only under a shard's lock, the
// locked path only under a.mu. Caller holds a.mu.
func (l *lane) addStatsLocked(s *Stats, inUse *meter) {
	for i := range l.shards {
		l.shards[i].mu.Lock()
	}
	s.BytesInUse, s.PeakInUse = inUse.cur.Load(), inUse.peak.Load()
	for i := range l.shards {
		sh := &l.shards[i]
		s.BytesInUse += sh.owed
		s.BytesCached += sh.cached
		s.LiveBuffers += sh.live
		s.Allocs += sh.allocs
		s.PoolHits += sh.allocs
		s.Frees += sh.frees
	}
	for i := range l.shards {
		l.shards[i].mu.Unlock()
	}
}
