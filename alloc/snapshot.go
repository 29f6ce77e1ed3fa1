package alloc

import (
	"cmp"
	"slices"
	"time"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// The walk's state numbers, blockStates' indices.
const (
	stLive = iota
	stWorkspace
	stGraphOwned
	stGraphPool
	stHeldForGraph
	stFree
	stCached
	numStates
)

var blockStates = [numStates]memmap.BlockState{memmap.BlockLive, memmap.BlockWorkspace, memmap.BlockGraphOwned, memmap.BlockGraphPool, memmap.BlockHeldForGraph, memmap.BlockCachedFragment, memmap.BlockCachedSegment}

// Snapshot returns the allocator's device memory now. The walk holds the
// allocator's lock: about a millisecond per 10,000 blocks (BENCHMARKS.md).
// It fails with ErrClosed once the allocator is closed.
func (a *Allocator) Snapshot() (memmap.Snapshot, error) {
	free := deviceFree(a.drv) // a driver query: not under a.mu
	s, w, err := takeSnapshot(a, free)
	if err != nil {
		return s, err
	}
	w.nameCallSites() // outside the lock: symbolizing is the slow part
	return s, nil
}

// takeSnapshot walks a under its lock for Snapshot.
func takeSnapshot(a *Allocator, free *int64) (memmap.Snapshot, *memWalk, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.guard.closed {
		return memmap.Snapshot{}, nil, a.fail("Snapshot", -1, StateNone, ErrClosed)
	}
	// The lane stays closed from the walk to the counters, so they are of
	// the moment of the blocks listed.
	a.lane.closeLocked()
	defer a.lane.openLocked()
	w := walkMemory(a, true)
	return memmap.Snapshot{
		Allocator: a.name, Backend: a.backend, Device: a.info.Name, DeviceMemory: a.info.TotalMemory,
		CaptureSafety: a.info.SafetyProfile(),
		Time:          time.Now(), Capturing: a.guard.cap != nil, ProfileRate: currentProfileRate(), Stats: a.statsLocked(),
		Bytes: w.byState(), Segments: w.segs, Graphs: w.graphs, Pools: w.pools, GraphInUse: w.graphInUse, DeviceFree: free,
	}, w, nil
}

// usage is a's Snapshot without its Segments and Graphs: the bytes by
// block state, the graph pools and the counters, of one moment, without
// listing the blocks (what metrics scrape: alloc/allocprom through
// alloc/internal/registry).
func usage(a *Allocator) (memmap.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.guard.closed {
		return memmap.Snapshot{}, a.fail("Usage", -1, StateNone, ErrClosed)
	}
	a.lane.closeLocked()
	defer a.lane.openLocked()
	w := walkMemory(a, false)
	return memmap.Snapshot{Allocator: a.name, Backend: a.backend, Device: a.info.Name, DeviceMemory: a.info.TotalMemory,
		Capturing: a.guard.cap != nil, Stats: a.statsLocked(), Bytes: w.byState(), Pools: w.pools, GraphInUse: w.graphInUse}, nil
}

// memWalk is one pass over the allocator's memory; list says whether
// segments and blocks are listed or only summed.
type memWalk struct {
	list   bool
	sums   [numStates]int64 // bytes by state
	segs   []memmap.Segment
	spans  [][2]int       // segs[i]'s blocks: blocks[spans[i][0]:spans[i][1]]
	blocks []memmap.Block // every segment's, in one array
	stacks []*stackRecord // blocks[i]'s profile stack, if sampled (shorter when the last are not)
	graphs []memmap.GraphInfo
	users  map[*block][]int // blocks graphs use or hold: their ids
	pools  []memmap.PoolInfo
	// lent maps each block a graph pool borrowed to its pool's index in
	// pools; arenas holds, by that index, the pool's own blocks in address
	// order (poolBlocks), which the walk lists in place of the borrowed.
	lent   map[*block]int
	arenas [][]*block
	free   map[*block]bool // free blocks outside the arenas' indexes (recent, the shards')

	graphInUse  int64 // bytes of live buffers allocated in captures, as requested
	largestFree int64 // the largest free or cached block (an out-of-memory error says it)
}

// walkMemory walks a's graphs, then its pool's segments, then its
// AllocSync and graph allocations. Caller holds a.mu.
func walkMemory(a *Allocator, list bool) *memWalk {
	w := &memWalk{list: list, users: map[*block][]int{}, free: map[*block]bool{}}
	if list { // live blocks and a tenth more for the free ones: few regrowths
		n := max(a.live.n+a.pooledLive, 0) // the lane's hand-outs are counted in the shards
		w.blocks = make([]memmap.Block, 0, n+n/8+64)
	}
	gs := make([]*Graph, 0, len(a.graphs))
	for g := range a.graphs {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(x, y *Graph) int { return cmp.Compare(x.id, y.id) })
	if c := a.guard.cap; c != nil {
		w.graph(memmap.GraphInfo{ID: c.id, Name: c.name, Pool: c.pool.idOrZero(), Capturing: true}, c)
	}
	for _, g := range gs {
		gi := memmap.GraphInfo{ID: g.id, Name: g.name, Eager: g.eager != nil, Launched: g.launched, Launches: g.launches}
		if g.cap != nil {
			gi.Pool = g.cap.pool.idOrZero()
		}
		w.graph(gi, g.cap)
	}
	w.walkPools(a)

	// Free blocks outside the arenas' indexes: the pool's recent ones and
	// the shards' (shard.go). The lane is closed for the walk, so neither
	// those nor live blocks' sizes change under it.
	a.lane.closeLocked()
	defer a.lane.openLocked()
	cached := w.free
	for _, b := range a.pool.recent[:a.pool.nRecent] {
		cached[b] = true
	}
	for i := range a.lane.shards {
		for _, b := range a.lane.shards[i].blocks[:a.lane.shards[i].n] {
			cached[b] = true
		}
	}
	for s := range a.pool.segments() {
		kind := "small"
		if s.ar == &a.pool.large {
			kind = "large"
		}
		w.segment(s, kind, cached)
	}
	// AllocSync buffers: live ones, and freed ones held for a graph.
	for b := a.live.head; b != nil; b = b.next {
		if b.kind == kindSync {
			w.single(b, "sync", 0)
		}
	}
	for b := range w.users {
		if b.kind == kindSync && !b.live() {
			w.single(b, "sync", 0)
		}
	}
	if c := a.guard.cap; c != nil {
		w.owned(c, c.id)
	}
	for _, g := range gs {
		if g.cap != nil {
			w.owned(g.cap, g.id)
		}
	}
	if list {
		for i, sp := range w.spans {
			w.segs[i].Blocks = w.blocks[sp[0]:sp[1]:sp[1]]
		}
		slices.SortFunc(w.segs, func(x, y memmap.Segment) int { return cmp.Compare(x.Ptr, y.Ptr) })
	}
	return w
}

// addSegment starts listing a segment's blocks.
func (w *memWalk) addSegment(s memmap.Segment) {
	w.segs = append(w.segs, s)
	w.spans = append(w.spans, [2]int{len(w.blocks), len(w.blocks)})
}

// graph records a graph (or the recording capture c) and marks the blocks
// its work uses or holds.
func (w *memWalk) graph(gi memmap.GraphInfo, c *capture) {
	if c != nil {
		for _, b := range c.blocks {
			gi.OwnedBytes += b.class
			gi.OwnedBlocks++
		}
		for _, b := range c.pooled {
			gi.OwnedBytes += b.class
			gi.OwnedBlocks++
		}
		for _, b := range c.deferred {
			gi.HeldBytes += b.class
			gi.HeldBlocks++
			w.use(b, gi.ID)
		}
		for _, b := range c.refs {
			if b.live() {
				gi.UsedBytes += b.size
				gi.UsedBlocks++
			} else if b.held.Load() {
				gi.HeldBytes += b.class
				gi.HeldBlocks++
			}
			w.use(b, gi.ID)
		}
	}
	if w.list {
		w.graphs = append(w.graphs, gi)
	}
}

// use records that graph id uses or holds b, once: a block its capture
// both referenced and deferred is listed once.
func (w *memWalk) use(b *block, id int) {
	if u := w.users[b]; len(u) == 0 || u[len(u)-1] != id {
		w.users[b] = append(u, id)
	}
}

// segment walks a pool segment's blocks in address order.
func (w *memWalk) segment(s *segment, kind string, cached map[*block]bool) {
	whollyFree := true
	for b := range s.blocks() {
		if whollyFree = b.free || b.kind == kindHole || cached[b]; !whollyFree {
			break
		}
	}
	if w.list {
		seg := memmap.Segment{Ptr: s.ptr, Size: s.size, Kind: kind}
		if s.exp != nil {
			seg.Expandable, seg.Span = true, s.exp.end
		}
		w.addSegment(seg)
	}
	for b := range s.blocks() {
		var st int
		switch {
		case b.kind == kindHole:
			continue // nothing mapped: no memory to show
		case b.live():
			st = liveState(b)
		case whollyFree:
			st = stCached
		case b.free || cached[b]:
			st = stFree
		case b.kind == kindShared: // lent to a graph pool: its blocks instead
			if i, ok := w.lent[b]; ok {
				w.poolBlocks(i, b, s.ptr)
				continue
			}
			st = stGraphOwned
		default: // retired, not in the pool: held or deferred for a graph
			st = stHeldForGraph
		}
		w.block(b, int64(b.ptr-s.ptr), st)
	}
}

// single records a block that is a driver allocation of its own.
func (w *memWalk) single(b *block, kind string, graph int) {
	if w.list {
		w.addSegment(memmap.Segment{Ptr: b.ptr, Size: b.class, Kind: kind, Graph: graph})
	}
	st := stHeldForGraph
	switch {
	case b.kind == kindGraph:
		st = stGraphOwned
		if b.live() {
			w.graphInUse += b.size
		}
	case b.live():
		st = liveState(b)
	}
	w.block(b, 0, st)
	if w.list && st == stGraphOwned {
		w.blocks[len(w.blocks)-1].Graph = graph
	}
}

// owned records the allocations capture c made, the graph's own.
func (w *memWalk) owned(c *capture, graph int) {
	for _, b := range c.blocks {
		w.single(b, "graph", graph)
	}
}

func liveState(b *block) int {
	if b.ws != "" {
		return stWorkspace
	}
	return stLive
}

func (w *memWalk) byState() map[memmap.BlockState]int64 {
	m := make(map[memmap.BlockState]int64, numStates)
	for i, n := range w.sums {
		m[blockStates[i]] = n
	}
	return m
}

// block counts b, at off in the segment listed last, in state st.
func (w *memWalk) block(b *block, off int64, st int) {
	if st == stFree || st == stCached {
		w.largestFree = max(w.largestFree, b.class)
	}
	w.sums[st] += b.class
	if !w.list {
		return
	}
	blk := memmap.Block{Offset: off, Size: b.class, State: blockStates[st], Workspace: b.ws}
	if b.live() {
		blk.Requested = b.size
	}
	if len(w.users) > 0 {
		blk.Graphs = w.users[b]
	}
	w.blocks = append(w.blocks, blk)
	w.spans[len(w.spans)-1][1] = len(w.blocks)
	if s := b.prof.Load(); s != nil && s.stk != nil {
		if n := len(w.blocks); len(w.stacks) < n { // room for every block listed so far, nil for the unsampled
			w.stacks = slices.Grow(w.stacks, cap(w.blocks)-len(w.stacks))[:n]
		}
		w.stacks[len(w.blocks)-1] = s.stk
	}
}
