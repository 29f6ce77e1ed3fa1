package alloc

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/capalloc/capalloc/internal/callstack"
)

// Device memory profiling: when a rate is set (SetProfileRate), allocations
// are sampled by size the way runtime.MemProfileRate samples the Go heap,
// each sample keeping its Go call stack, and WriteProfile writes them as a
// pprof heap profile (pprof.go). Disabled, the cost on the allocation path
// is one atomic load and a branch.

// profileRate is the process-wide rate: 0 off, 1 every allocation, else
// the mean bytes between samples.
var profileRate atomic.Int64

// SetProfileRate sets the device memory profile's sampling rate for every
// allocator of the process and returns the previous one: 0 (the default)
// records nothing, 1 records every allocation, n > 1 records on average
// one allocation per n bytes (512 << 10, runtime.MemProfileRate's
// default, is a good start), each sample weighted to estimate the whole,
// as runtime.MemProfileRate does.
// Turning it off keeps what was recorded: buffers sampled before stay in
// the in-use figures until they are freed. A negative rate is refused with
// ErrInvalidValue and changes nothing.
func SetProfileRate(rate int) (previous int, err error) {
	if rate < 0 {
		return currentProfileRate(), wrapf(ErrInvalidValue, "profile rate %d: want 0 (off), 1 (every allocation) or bytes per sample", rate)
	}
	return int(profileRate.Swap(int64(rate))), nil
}

// currentProfileRate returns the sampling rate SetProfileRate set (the
// views read it through alloc/internal/registry).
func currentProfileRate() int { return int(profileRate.Load()) }

// maxStack bounds a sample's stack, as the runtime's heap profile does
// (32 frames), plus the allocator's own frames that pprof.go trims.
const maxStack = 32 + 3

// memProfile is an allocator's sampled allocations. Guarded by a.mu.
type memProfile struct {
	next   int64                   // bytes to allocate before the next sample
	rate   int64                   // the rate next was drawn for
	stacks map[uint64]*stackRecord // by hashStack, colliding ones chained
	inUse  *sample                 // samples whose memory is still taken, linked by next
	nInUse int
	spare  *sample // recycled records, linked by next
}

// stackRecord is one distinct call stack and what was allocated from it,
// by owner at allocation (weighted estimates).
type stackRecord struct {
	pcs       []uintptr
	allocs    [numOwners]struct{ objects, bytes float64 }
	collision *stackRecord // another stack with the same hash
}

// hashStack hashes a stack's addresses (FNV-1a over words): cheaper than
// hashing a fixed-size array key, most of it zeros.
func hashStack(pcs []uintptr) uint64 {
	h := uint64(14695981039346656037)
	for _, pc := range pcs {
		h = (h ^ uint64(pc)) * 1099511628211
	}
	return h
}

// sample is one sampled allocation still holding memory: a buffer (blk)
// or a pinned host buffer (host).
type sample struct {
	stk        *stackRecord
	size, rate int64
	blk        *block
	host       *HostBuffer
	prev, next *sample
}

// owner says who holds a sampled allocation's memory: the profile's
// owner label.
type owner uint8

const (
	ownerPoolLive     owner = iota // a live buffer from the pool
	ownerSyncLive                  // a live AllocSync buffer (eager, outside the pool)
	ownerGraphOwned                // allocated in a capture: the graph's until Graph.Close
	ownerHeldForGraph              // freed, but held: a live graph's recorded work uses it
	ownerWorkspace                 // a workspace (Allocator.Workspace)
	ownerPinnedHost                // pinned host memory (HostAlloc)
	ownerGraphPool                 // a graph pool's memory no live buffer of its graphs holds (pprof.go)
	numOwners
)

var ownerNames = [numOwners]string{"pool-live", "sync-live", "graph-owned", "held-for-graph", "workspace", "pinned-host", "graph-pool"}

func (o owner) String() string { return ownerNames[o] }

// ownerOf says who holds b's memory now; b is live, or retired and not
// yet released (held for a graph, freed in a graph, or deferred by a
// capture). Caller holds a.mu.
func ownerOf(b *block) owner {
	switch {
	case b.kind == kindGraph || b.kind == kindShared:
		return ownerGraphOwned
	case !b.live():
		return ownerHeldForGraph
	case b.ws != "":
		return ownerWorkspace
	case b.kind == kindSync:
		return ownerSyncLive
	}
	return ownerPoolLive
}

// sample counts an allocation of size bytes, b's or h's, towards the
// next sample and records it, with the caller's stack, when it is due.
// Called, only while a rate is set, straight from the exported method
// that allocated (so the stack starts there: this frame is skipped).
// Caller holds the allocator's lock.
//
//go:noinline
func (p *memProfile) sample(b *block, h *HostBuffer, size int64) {
	rate := profileRate.Load()
	if rate == 0 {
		return // turned off meanwhile
	}
	if rate != 1 {
		if p.rate != rate {
			p.rate, p.next = rate, drawSampleGap(rate)
		}
		if p.next -= size; p.next > 0 {
			return
		}
		p.next = drawSampleGap(rate)
	}
	var buf [maxStack]uintptr
	pcs := buf[:callstack.Callers(1, buf[:])]
	key := hashStack(pcs)
	stk := p.stacks[key]
	for stk != nil && !slices.Equal(stk.pcs, pcs) {
		stk = stk.collision
	}
	if stk == nil {
		if p.stacks == nil {
			p.stacks = map[uint64]*stackRecord{}
		}
		stk = &stackRecord{pcs: slices.Clone(pcs), collision: p.stacks[key]}
		p.stacks[key] = stk
	}
	o := ownerPinnedHost
	if b != nil {
		o = ownerOf(b)
	}
	objects, bytes := sampleWeight(size, rate)
	stk.allocs[o].objects += objects
	stk.allocs[o].bytes += bytes

	s := p.spare
	if s != nil {
		p.spare = s.next
	} else {
		s = new(sample)
	}
	*s = sample{stk: stk, size: size, rate: rate, blk: b, host: h, next: p.inUse}
	if p.inUse != nil {
		p.inUse.prev = s
	}
	p.inUse = s
	p.nInUse++
	if b != nil {
		b.prof.Store(s)
	} else {
		h.prof = s
	}
}

// drop forgets sample s. Not inlined: the release paths inline only the
// nil check before it, and stay as small as before profiling existed.
//
//go:noinline
func (p *memProfile) drop(s *sample) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		p.inUse = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	}
	p.nInUse--
	*s = sample{next: p.spare}
	p.spare = s
}

// drawSampleGap returns the bytes until the next sample: exponentially
// distributed with mean rate, so every byte is equally likely to be
// sampled (the runtime's rule).
func drawSampleGap(rate int64) int64 {
	return int64(rand.ExpFloat64()*float64(rate)) + 1
}

// sampleWeight is what one sampled allocation of size bytes stands for at
// rate: an allocation of size is sampled with probability
// 1-exp(-size/rate), so it counts 1/that (runtime/pprof's scaling).
func sampleWeight(size, rate int64) (objects, bytes float64) {
	if rate <= 1 {
		return 1, float64(size)
	}
	scale := 1 / -math.Expm1(-float64(size)/float64(rate))
	return scale, scale * float64(size)
}
