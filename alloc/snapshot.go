package alloc

import (
	"cmp"
	"slices"
	"time"
)

// BlockState is what a block of device memory is doing, in a Snapshot.
type BlockState string

const (
	// BlockLive: a buffer the engine holds.
	BlockLive BlockState = "live"
	// BlockWorkspace: a workspace (Allocator.Workspace).
	BlockWorkspace BlockState = "workspace"
	// BlockGraphOwned: allocated in a capture; the graph's until Graph.Close.
	BlockGraphOwned BlockState = "graph-owned"
	// BlockHeldForGraph: freed by the engine, but kept because a live
	// graph's recorded work (or the capture recording now) uses it.
	BlockHeldForGraph BlockState = "held-for-graph"
	// BlockFree: free space in a segment that also holds memory in use:
	// reused by requests that fit, never given back on its own.
	BlockFree BlockState = "free"
	// BlockCached: a segment wholly free: reused, or given back to the
	// driver by Trim or under memory pressure.
	BlockCached BlockState = "cached"
)

// BlockStates lists the states in the order views draw them.
var BlockStates = blockStates[:]

// The walk's state numbers, blockStates' indices.
const (
	stLive = iota
	stWorkspace
	stGraphOwned
	stHeldForGraph
	stFree
	stCached
	numStates
)

var blockStates = [numStates]BlockState{BlockLive, BlockWorkspace, BlockGraphOwned, BlockHeldForGraph, BlockFree, BlockCached}

// Snapshot is an allocator's device memory at one moment, JSON-encodable:
// every driver allocation (segment) with its blocks, every live graph with
// what it owns and holds, and the counters.
type Snapshot struct {
	Allocator    string    `json:"allocator"`
	Backend      string    `json:"backend"`
	Device       string    `json:"device"`
	DeviceMemory int64     `json:"device_memory"`
	Time         time.Time `json:"time"`
	Capturing    bool      `json:"capturing"` // a capture of this allocator is recording
	// CaptureSafety is the device's safety profile (docs/capture-safety.md):
	// "strict (gb10, sm 12.1, integrated, pageable memory access)".
	CaptureSafety string `json:"capture_safety"`
	ProfileRate   int    `json:"profile_rate"` // SetProfileRate's rate
	Stats         Stats  `json:"stats"`
	// Bytes sums the segments' blocks by state.
	Bytes    map[BlockState]int64 `json:"bytes"`
	Segments []Segment            `json:"segments"`
	Graphs   []GraphInfo          `json:"graphs"`
}

// Segment is one driver allocation: a pool segment the pool carves blocks
// from (kind "small" or "large", the pool's two arenas), an AllocSync
// buffer ("sync"), or an allocation made in a capture ("graph").
type Segment struct {
	Ptr  DevicePtr `json:"ptr"`
	Size int64     `json:"size"`
	Kind string    `json:"kind"`
	// Graph, for kind "graph": the id of the graph that owns it (0: the
	// capture recording now).
	Graph  int     `json:"graph"`
	Blocks []Block `json:"blocks"`
	// Expandable: an arena's expandable range (Options.ExpandableSegments).
	// Size is then the bytes mapped; the blocks lie at their offsets from
	// the range's start (Ptr) across Span bytes, and the gaps between them
	// are unmapped.
	Expandable bool  `json:"expandable,omitempty"`
	Span       int64 `json:"span,omitempty"`
}

// Block is a run of a segment's bytes in one state.
type Block struct {
	Offset    int64      `json:"offset"`
	Size      int64      `json:"size"` // bytes of the segment it covers
	State     BlockState `json:"state"`
	Requested int64      `json:"requested,omitempty"` // a buffer's size as asked for
	Workspace string     `json:"workspace,omitempty"`
	// Graphs lists the live graphs whose recorded work uses the block
	// (0: the capture recording now): it is held while they live.
	Graphs []int `json:"graphs,omitempty"`
}

// GraphInfo is a live graph, or the capture recording now (ID 0), with
// the memory it owns and the memory it keeps from being reused.
type GraphInfo struct {
	ID        int  `json:"id"`
	Capturing bool `json:"capturing,omitempty"`
	Eager     bool `json:"eager,omitempty"` // an eager fallback: owns nothing
	Launched  bool `json:"launched,omitempty"`
	// Owned: allocated in its capture, its own until Graph.Close.
	OwnedBytes  int64 `json:"owned_bytes"`
	OwnedBlocks int   `json:"owned_blocks"`
	// Held: buffers the engine freed that its recorded work uses, kept
	// until it is closed.
	HeldBytes  int64 `json:"held_bytes"`
	HeldBlocks int   `json:"held_blocks"`
	// Used: live buffers its recorded work uses (held if freed).
	UsedBytes  int64 `json:"used_bytes"`
	UsedBlocks int   `json:"used_blocks"`
}

// Snapshot returns the allocator's device memory now. The walk holds the
// allocator's lock: about a millisecond per 10,000 blocks (BENCHMARKS.md).
// It fails with ErrClosed once the allocator is closed.
func (a *Allocator) Snapshot() (Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.guard.closed {
		return Snapshot{}, a.fail("Snapshot", -1, StateNone, ErrClosed)
	}
	// The lane stays closed from the walk to the counters, so they are of
	// the moment of the blocks listed.
	a.lane.closeLocked()
	defer a.lane.openLocked()
	w := walkMemory(a, true)
	return Snapshot{
		Allocator: a.name, Backend: a.backend, Device: a.info.Name, DeviceMemory: a.info.TotalMemory,
		CaptureSafety: a.info.SafetyProfile(),
		Time:          time.Now(), Capturing: a.guard.cap != nil, ProfileRate: ProfileRate(), Stats: a.statsLocked(),
		Bytes: w.byState(), Segments: w.segs, Graphs: w.graphs,
	}, nil
}

// BytesByState sums the allocator's device memory by block state, as
// Snapshot's Bytes, without listing the blocks (what metrics scrape).
func (a *Allocator) BytesByState() (map[BlockState]int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.guard.closed {
		return nil, a.fail("BytesByState", -1, StateNone, ErrClosed)
	}
	return walkMemory(a, false).byState(), nil
}

// memWalk is one pass over the allocator's memory; list says whether
// segments and blocks are listed or only summed.
type memWalk struct {
	list   bool
	sums   [numStates]int64 // bytes by state
	segs   []Segment
	spans  [][2]int // segs[i]'s blocks: blocks[spans[i][0]:spans[i][1]]
	blocks []Block  // every segment's, in one array
	graphs []GraphInfo
	users  map[*block][]int // blocks graphs use or hold: their ids
}

// walkMemory walks a's graphs, then its pool's segments, then its
// AllocSync and graph allocations. Caller holds a.mu.
func walkMemory(a *Allocator, list bool) *memWalk {
	w := &memWalk{list: list, users: map[*block][]int{}}
	if list { // live blocks and a tenth more for the free ones: few regrowths
		n := max(a.live.n+a.pooledLive, 0) // the lane's hand-outs are counted in the shards
		w.blocks = make([]Block, 0, n+n/8+64)
	}
	gs := make([]*Graph, 0, len(a.graphs))
	for g := range a.graphs {
		gs = append(gs, g)
	}
	slices.SortFunc(gs, func(x, y *Graph) int { return cmp.Compare(x.id, y.id) }) // unnumbered (0) first, then by id
	for _, g := range gs {
		if g.id == 0 {
			a.graphIDs++
			g.id = a.graphIDs
		}
	}
	slices.SortFunc(gs, func(x, y *Graph) int { return cmp.Compare(x.id, y.id) })
	if a.guard.cap != nil {
		w.graph(GraphInfo{ID: 0, Capturing: true}, a.guard.cap)
	}
	for _, g := range gs {
		w.graph(GraphInfo{ID: g.id, Eager: g.eager != nil, Launched: g.launched}, g.cap)
	}

	// Free blocks outside the arenas' indexes: the pool's recent ones and
	// the shards' (shard.go). The lane is closed for the walk, so neither
	// those nor live blocks' sizes change under it.
	a.lane.closeLocked()
	defer a.lane.openLocked()
	cached := map[*block]bool{}
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
	if a.guard.cap != nil {
		w.owned(a.guard.cap, 0)
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
		slices.SortFunc(w.segs, func(x, y Segment) int { return cmp.Compare(x.Ptr, y.Ptr) })
	}
	return w
}

// addSegment starts listing a segment's blocks.
func (w *memWalk) addSegment(s Segment) {
	w.segs = append(w.segs, s)
	w.spans = append(w.spans, [2]int{len(w.blocks), len(w.blocks)})
}

// graph records a graph (or the recording capture c) and marks the blocks
// its work uses or holds.
func (w *memWalk) graph(gi GraphInfo, c *capture) {
	if c != nil {
		for _, b := range c.blocks {
			gi.OwnedBytes += b.class
			gi.OwnedBlocks++
		}
		for _, b := range c.deferred {
			gi.HeldBytes += b.class
			gi.HeldBlocks++
			w.users[b] = append(w.users[b], gi.ID)
		}
		for _, b := range c.refs {
			if b.live() {
				gi.UsedBytes += b.size
				gi.UsedBlocks++
			} else if b.held.Load() {
				gi.HeldBytes += b.class
				gi.HeldBlocks++
			}
			w.users[b] = append(w.users[b], gi.ID)
		}
	}
	if w.list {
		w.graphs = append(w.graphs, gi)
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
		seg := Segment{Ptr: s.ptr, Size: s.size, Kind: kind}
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
		default: // retired, not in the pool: held or deferred for a graph
			st = stHeldForGraph
		}
		w.block(b, int64(b.ptr-s.ptr), st)
	}
}

// single records a block that is a driver allocation of its own.
func (w *memWalk) single(b *block, kind string, graph int) {
	if w.list {
		w.addSegment(Segment{Ptr: b.ptr, Size: b.class, Kind: kind, Graph: graph})
	}
	st := stHeldForGraph
	switch {
	case b.kind == kindGraph:
		st = stGraphOwned
	case b.live():
		st = liveState(b)
	}
	w.block(b, 0, st)
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

func (w *memWalk) byState() map[BlockState]int64 {
	m := make(map[BlockState]int64, numStates)
	for i, n := range w.sums {
		m[blockStates[i]] = n
	}
	return m
}

// block counts b, at off in the segment listed last, in state st.
func (w *memWalk) block(b *block, off int64, st int) {
	w.sums[st] += b.class
	if !w.list {
		return
	}
	blk := Block{Offset: off, Size: b.class, State: blockStates[st], Workspace: b.ws}
	if b.live() {
		blk.Requested = b.size
	}
	if len(w.users) > 0 {
		blk.Graphs = w.users[b]
	}
	w.blocks = append(w.blocks, blk)
	w.spans[len(w.spans)-1][1] = len(w.blocks)
}
