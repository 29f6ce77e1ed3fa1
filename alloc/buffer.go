package alloc

import (
	"github.com/capalloc/capalloc/alloc/driver"
	"sync/atomic"
)

// blockKind says where a block's memory came from, which decides how it is
// given back.
type blockKind uint8

const (
	kindPooled blockKind = iota // MallocAsync outside capture, recycled by the pool
	kindSync                    // AllocSync: Malloc/Free, never pooled
	kindGraph                   // MallocAsync inside a capture: owned by that graph
	kindHole                    // a hole in an expandable range: nothing mapped (expandable.go)
	kindShared                  // a graph pool's: allocated in a capture into it, or lent to it by the pool (graphpool.go)
)

// block is the allocator's record of one driver allocation. Records are
// recycled with their memory, so a pool hit allocates nothing; state
// changes at every hand-out and retirement so stale Buffers are detected.
type block struct {
	a     *Allocator // set when the record is made, never changed
	ptr   driver.DevicePtr
	size  int64 // bytes requested by the current owner
	class int64 // bytes held from the driver
	// state counts the record's hand-outs and retirements: odd while
	// live. A Buffer holds the odd value it was handed out with, so it is
	// valid while state equals it; a retirement is a compare-and-swap from
	// that value, which makes a double free fail even when two goroutines
	// race to it on the per-P lane (shard.go). The lane's Free retires to
	// the next odd value at once (arms the record: a value never handed
	// out), so the record's next hand-out writes nothing (handOut): a free
	// record may be odd, and live asks the pool too.
	state atomic.Uint64
	kind  blockKind
	cap   *capture // capture that allocated a kindGraph or kindShared block
	ws    string   // workspace name, "" for an ordinary buffer
	// prof is the profile's record of this allocation, nil if not
	// sampled: set and cleared under a.mu, read by the lane's Free
	// without it (shard.go), hence atomic.
	prof atomic.Pointer[sample]

	freedInGraph bool // kindGraph block whose free node was captured
	materialized bool // kindGraph block a launch made real: the caller frees it

	// refs counts what still uses this block's memory: the captures and
	// live graphs whose recorded work uses it (besides the graph that
	// allocated it), and the pins of blocking driver calls made on it
	// without a.mu (releases.pinLocked, release.go: a pageable copy). Its
	// memory is not reused while refs > 0: released meanwhile, it is held
	// (held) and released when the last of them lets go.
	// Both are atomic for the per-P lane's free (shard.go, "held").
	refs    atomic.Int32
	held    atomic.Bool
	lastCap *capture // capture that last counted a reference, to count once

	prev, next *block // intrusive list of live AllocSync and graph blocks (pooled ones are found in their segments)

	// Pooled blocks only (pool.go): the segment the block is carved from,
	// its address-ordered neighbours there, and while free its place in
	// the arena's fitIndex.
	seg                *segment
	segPrev, segNext   *block
	freePrev, freeNext *block
	bucket             int32
	free               bool
	// cached: in the pool's recent list or a lane shard, free but not in
	// the index. Written under a.mu or the shard's lock, read under a.mu
	// with the lane closed (a walk) or for blocks the lane cannot hold.
	cached bool

	// pad makes a record a whole number of cache lines (blockSize; a test
	// holds it), so the Go heap's size class puts every record on its own
	// lines: two goroutines' records side by side would otherwise share a
	// line, and each lane pair's writes to state would bounce it between
	// their cores (two goroutines on one allocator ran at one goroutine's
	// pace in about half the runs).
	_ [24]byte
}

// live reports whether the block is handed out: an odd state (state) that
// is not a free record's, armed.
func (b *block) live() bool {
	return b.state.Load()&1 == 1 && !b.free && !b.cached && b.kind != kindHole
}

// validFor reports whether a Buffer handed out with gen (a view's too:
// its viewBit aside) still owns b.
func (b *block) validFor(gen uint64) bool { return b.state.Load() == gen&^viewBit }

// Buffer is a handle to device memory from an Allocator. It is a small value;
// copying it does not copy memory. The zero Buffer is invalid. After Free (or
// Close of the graph that owns it) every copy of the handle is invalid and
// operations on it fail with ErrInvalidBuffer.
type Buffer struct {
	// Four fields, no more: the compiler keeps a struct of up to four in
	// registers, so returning one from a call (Alloc's frames) copies
	// nothing through memory; with a fifth, BenchmarkPoolTrace ran a fifth
	// slower (BENCHMARKS.md).
	blk  *block
	gen  uint64 // block.state at the hand-out, with viewBit set in a view
	ptr  driver.DevicePtr
	size int64
}

// viewBit marks a view (Slice) in Buffer.gen: a view shares its buffer's
// generation and may not be freed. block.state never reaches it (one
// increment per hand-out or retirement), so a generation never holds it.
const viewBit = 1 << 63

// isView reports whether b is a view made by Slice.
func (b Buffer) isView() bool { return b.gen&viewBit != 0 }

// Ptr is the device address of the first byte.
func (b Buffer) Ptr() driver.DevicePtr { return b.ptr }

// Size is the number of usable bytes.
func (b Buffer) Size() int64 { return b.size }

// liveList is an intrusive doubly linked list: O(1) insert and remove with
// no allocation on the hot path.
type liveList struct {
	head *block
	n    int
}

func (l *liveList) push(b *block) {
	b.prev, b.next = nil, l.head
	if l.head != nil {
		l.head.prev = b
	}
	l.head = b
	l.n++
}

func (l *liveList) remove(b *block) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		l.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	}
	b.prev, b.next = nil, nil
	l.n--
}
