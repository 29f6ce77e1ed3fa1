package alloc

import (
	"errors"
	"sync/atomic"
)

// The caching pinned host allocator behind HostAlloc. Pinning is a
// driver call that a capture forbids (strict safety: any capture in the
// domain), so a freed HostBuffer's memory is kept, by size class, and a
// later HostAlloc of its class takes it back without a driver call: a hit
// is allowed during a capture, strict safety included. Small classes are
// carved from chunks pinned once; larger ones are pinned one to a chunk.
//
// Reuse is stream-ordered, as device blocks' is: memory freed while work
// queued on the allocator's stream may still copy into or out of it is
// reused only once the stream is known to be past that work, that is once
// a Synchronize (or a Query that found the stream done) that began after
// the free has returned. Memory a capture's copies use, or that a capture
// took from the cache, is held by the capture's graph until Graph.Close,
// as device memory is (hostSlot.refs). Trim, the reclaim ladder (on
// unified memory, where host memory is the device's) and Close give the
// cached chunks back; Options.NoHostCache (host_cache=false) turns the
// cache off: every HostAlloc pins and every Close unpins.

const (
	hostMinClass  = 4 << 10 // the smallest class: a page
	hostChunkSize = 2 << 20 // classes up to it are powers of two; larger ones its multiples
	hostCarveMax  = 512 << 10
)

// hostClassOf is the class a HostAlloc of size bytes is served from.
func hostClassOf(size int64) int64 {
	if size > hostChunkSize {
		return (size + hostChunkSize - 1) / hostChunkSize * hostChunkSize
	}
	c := int64(hostMinClass)
	for c < size {
		c <<= 1
	}
	return c
}

// hostChunkFor is the bytes pinned at once for class: a chunk carved
// into slots for small classes, one slot otherwise.
func hostChunkFor(class int64) int64 {
	if class <= hostCarveMax {
		return hostChunkSize
	}
	return class
}

// hostChunk is one driver pinning (HostAlloc), carved into slots of one
// class.
type hostChunk struct {
	b     []byte
	class int64
	used  int // slots handed out or held, not in the free lists
}

// hostSlot is a class-sized piece of a chunk. freedAt is the stream
// position its last free was made at (hostCache.begun + 1 then; 0 for a
// slot never handed out): it may be reused once hostCache.passed reaches
// it. refs counts the captures whose work uses it; a slot freed while
// referenced is held until the last reference goes.
type hostSlot struct {
	chunk   *hostChunk
	b       []byte
	freedAt uint64
	refs    int
	held    bool
}

// hostCache is an allocator's cache of pinned host memory: a.host. Its
// lists and counters are guarded by a.mu; begun and passed are atomics,
// so a Synchronize marks its position without the lock.
type hostCache struct {
	free   map[int64][]*hostSlot // by class, oldest free first
	chunks map[*hostChunk]struct{}
	cached int64  // bytes of slots in the free lists
	pinned int64  // bytes of the chunks held from the driver
	pins   uint64 // pinnings made (driver HostAlloc calls)
	begun  atomic.Uint64
	passed atomic.Uint64
}

func (c *hostCache) init() {
	c.free = map[int64][]*hostSlot{}
	c.chunks = map[*hostChunk]struct{}{}
}

// begin marks a synchronize (or query) beginning: the position returned
// is passed once it returns with the stream done (pass).
func (c *hostCache) begin() uint64 { return c.begun.Add(1) }

// pass records that the stream ran everything queued before position pos.
func (c *hostCache) pass(pos uint64) {
	for p := c.passed.Load(); pos > p && !c.passed.CompareAndSwap(p, pos); p = c.passed.Load() {
	}
}

// takeLocked takes a reusable slot of class: nil when there is none,
// pending then says whether one is only waiting for the stream. Caller
// holds a.mu.
func (c *hostCache) takeLocked(class int64) (s *hostSlot, pending bool) {
	list := c.free[class]
	if len(list) == 0 {
		return nil, false
	}
	s = list[0]
	if s.freedAt > c.passed.Load() {
		return nil, true // the oldest free is not past: none is
	}
	list[0] = nil
	c.free[class] = list[1:]
	c.cached -= int64(len(s.b))
	s.chunk.used++
	return s, false
}

// putLocked returns slot s to its free list at the current stream
// position, or holds it while a capture references it. Caller holds a.mu.
func (c *hostCache) putLocked(s *hostSlot) {
	if _, ok := c.chunks[s.chunk]; !ok {
		return // given back already (Close)
	}
	if s.refs > 0 {
		s.held = true
		return
	}
	s.held = false
	s.freedAt = c.begun.Load() + 1
	c.free[s.chunk.class] = append(c.free[s.chunk.class], s)
	c.cached += int64(len(s.b))
	s.chunk.used--
}

// addChunkLocked records a new pinning of class and returns its first
// slot, handed out; carve puts the rest in the free list. Caller holds
// a.mu.
func (c *hostCache) addChunkLocked(b []byte, class int64) (*hostChunk, *hostSlot) {
	ch := &hostChunk{b: b, class: class, used: 1}
	c.chunks[ch] = struct{}{}
	c.pinned += int64(len(b))
	c.pins++
	return ch, &hostSlot{chunk: ch, b: b[:class:class]}
}

// carveLocked puts the slots of ch after its first in the free list,
// never used, once the pinning that made ch is the caller's for good.
func (c *hostCache) carveLocked(ch *hostChunk) {
	if _, ok := c.chunks[ch]; !ok {
		return
	}
	for off := ch.class; off+ch.class <= int64(len(ch.b)); off += ch.class {
		c.free[ch.class] = append(c.free[ch.class], &hostSlot{chunk: ch, b: ch.b[off : off+ch.class : off+ch.class]})
		c.cached += ch.class
	}
}

// dropChunkLocked forgets ch (its memory is about to be unpinned);
// false if it was forgotten already.
func (c *hostCache) dropChunkLocked(ch *hostChunk) bool {
	if _, ok := c.chunks[ch]; !ok {
		return false
	}
	delete(c.chunks, ch)
	c.pinned -= int64(len(ch.b))
	return true
}

// takeIdleLocked takes every chunk with no slot in use or held out of the
// cache, for the caller to unpin. Unpinning is a driver call: make it
// where the guard allows one (cudaFreeHost waits for the device, so
// slots still waiting for the stream are safe to unpin). Caller holds
// a.mu.
func (c *hostCache) takeIdleLocked() [][]byte {
	var out [][]byte
	for ch := range c.chunks {
		if ch.used == 0 {
			out = append(out, ch.b)
			c.dropChunkLocked(ch)
		}
	}
	if len(out) == 0 {
		return nil
	}
	for class, list := range c.free {
		kept := list[:0]
		for _, s := range list {
			if _, ok := c.chunks[s.chunk]; ok {
				kept = append(kept, s)
			} else {
				c.cached -= int64(len(s.b))
			}
		}
		clear(list[len(kept):])
		c.free[class] = kept
	}
	return out
}

// takeAllLocked empties the cache for Close: every chunk, in use or not.
func (c *hostCache) takeAllLocked() [][]byte {
	out := make([][]byte, 0, len(c.chunks))
	for ch := range c.chunks {
		out = append(out, ch.b)
	}
	c.init()
	c.cached, c.pinned = 0, 0
	return out
}

// refLocked records that capture cp's work uses slot s (nil: not cached
// memory), holding it from reuse until cp is released. Caller holds a.mu.
func (c *hostCache) refLocked(cp *capture, s *hostSlot) {
	if cp == nil || s == nil {
		return
	}
	s.refs++
	cp.hostRefs = append(cp.hostRefs, s)
}

// unrefLocked drops the references a released capture held; a slot
// closed meanwhile goes to its free list now. Caller holds a.mu.
func (c *hostCache) unrefLocked(slots []*hostSlot) {
	for _, s := range slots {
		if s.refs--; s.refs == 0 && s.held {
			c.putLocked(s)
		}
	}
}

// unpinAll unpins chunks with free, joining the errors.
func unpinAll(free func([]byte) error, bufs [][]byte) error {
	var errs []error
	for _, b := range bufs {
		errs = append(errs, free(b))
	}
	return errors.Join(errs...)
}

// trimHostLocked takes the host cache's idle chunks for Trim to unpin,
// where the guard allows an unpinning now (none while a capture forbids
// it: they stay cached). Caller holds a.mu.
func trimHostLocked(a *Allocator, st CaptureState) [][]byte {
	if a.guard.unsafeAllowedLocked(st, false) != nil || a.guard.strictLocked("unpinning cached host memory") != nil {
		return nil
	}
	return a.host.takeIdleLocked()
}

// releaseHost is the reclaim ladder's host rung: on unified memory (GB10,
// cpu) pinned host memory is taken from the device's, so the host cache's
// idle chunks are unpinned, under the watchdog; on a discrete device it
// would free nothing the device can use. Called with a.mu held, on a sync
// path (the gate held, no capture on the stream).
func (u driverUpstream) releaseHost(op string) bool {
	a := u.a
	if !a.info.UnifiedMemory {
		return false
	}
	bufs := trimHostLocked(a, StateNone)
	if len(bufs) == 0 {
		return false
	}
	_, err := a.guard.watchdog.run(op, a.guard.watchdog.timeout, func() error { return unpinAll(a.drv.HostFree, bufs) }, nil)
	if err != nil {
		a.opts.logger().Warn("capalloc: unpinning cached host memory", "backend", a.backend, "err", err)
	}
	return true
}
