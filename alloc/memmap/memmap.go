// Package memmap holds the data of an allocator's memory map: what
// alloc.Allocator.Snapshot returns, JSON-encodable, with no behaviour of
// its own but its text renderings (Stats.String, Snapshot.Summary, SizeText),
// which the allocator and the views share (the views in alloc/allocview
// and alloc/allocprom draw the rest).
package memmap

import (
	"fmt"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// BlockState is what a block of device memory is doing, in a Snapshot.
// Every byte the allocator holds from the driver is in exactly one state.
// "Cached" means one thing everywhere (the views, the metrics,
// Stats.BytesCached): reserved from the driver and not in use, the bytes
// of the two states whose Cached is true.
type BlockState string

// The states, in the order views draw them; Meaning says what each is.
const (
	BlockLive           BlockState = "live"
	BlockWorkspace      BlockState = "workspace"
	BlockGraphOwned     BlockState = "graph-owned"
	BlockGraphPool      BlockState = "graph-pool"
	BlockHeldForGraph   BlockState = "held-for-graph"
	BlockCachedFragment BlockState = "cached-fragment"
	BlockCachedSegment  BlockState = "cached-segment"
)

// meanings are the states' one-sentence explanations, written once: the
// segment map's legend and tooltips draw them, text views can print them,
// and docs/device-memory.md says the same words (a test checks it).
var meanings = map[BlockState]string{
	BlockLive:           "A buffer the engine holds (Alloc, AllocSync).",
	BlockWorkspace:      "A named scratch buffer (Allocator.Workspace), kept until ReleaseWorkspace.",
	BlockGraphOwned:     "Allocated inside a capture: the graph's until Graph.Close.",
	BlockGraphPool:      "Free in a graph pool: reused by its next captures, never by eager allocations.",
	BlockHeldForGraph:   "Freed, but kept while a live graph (or the recording capture) uses it.",
	BlockCachedFragment: "Cached: free space in a segment still in use, reused by requests that fit.",
	BlockCachedSegment:  "Cached: a segment wholly free, reused or given back by Trim or memory pressure.",
}

// Meaning says in one sentence what a block in state st is; "" for a
// state this package does not define.
func (st BlockState) Meaning() string { return meanings[st] }

// Cached reports whether st's bytes count as cached (Stats.BytesCached):
// reserved from the driver and not in use.
func (st BlockState) Cached() bool {
	return st == BlockCachedFragment || st == BlockCachedSegment
}

// BlockStates returns the states in the order views draw them; the slice
// is the caller's.
func BlockStates() []BlockState {
	return []BlockState{BlockLive, BlockWorkspace, BlockGraphOwned, BlockGraphPool, BlockHeldForGraph, BlockCachedFragment, BlockCachedSegment}
}

// Graphs reports whether st's bytes are graphs' memory: what a capture
// allocated, what a graph pool keeps, what a freed buffer a graph uses
// still holds. Fragmentation leaves them out.
func (st BlockState) Graphs() bool {
	return st == BlockGraphOwned || st == BlockGraphPool || st == BlockHeldForGraph
}

// Snapshot is an allocator's device memory at one moment, JSON-encodable:
// every driver allocation (segment) with its blocks, every live graph with
// what it owns and holds, every graph pool, and the counters. What a
// metrics scrape reads is a Snapshot without Segments and Graphs.
type Snapshot struct {
	Allocator    string    `json:"allocator"`
	Backend      string    `json:"backend"`
	Device       string    `json:"device"`
	DeviceMemory int64     `json:"device_memory"`
	Time         time.Time `json:"time"`
	Capturing    bool      `json:"capturing"` // a capture of this allocator is recording
	// CaptureSafety is the device's safety profile (docs/capture-safety.md):
	// "strict (gb10, sm 12.1, integrated, pageable memory access via host page tables)".
	CaptureSafety string `json:"capture_safety"`
	ProfileRate   int    `json:"profile_rate"` // alloc.SetProfileRate's rate
	Stats         Stats  `json:"stats"`        // alloc.Allocator.Stats at the moment of the blocks
	// Bytes sums the segments' blocks by state.
	Bytes    map[BlockState]int64 `json:"bytes"`
	Segments []Segment            `json:"segments"`
	// Graphs are the live graphs and the capture recording, by ID.
	Graphs []GraphInfo `json:"graphs"`
	// Pools are the graph pools not yet disposed, by ID.
	Pools []PoolInfo `json:"graph_pools"`
	// GraphInUse is the part of Stats.BytesInUse in buffers allocated in
	// captures (graph-owned and live): Fragmentation leaves it out.
	GraphInUse int64 `json:"graph_in_use"`
	// DeviceFree is the device's free memory when the driver can tell
	// (driver.MemInfoer), every user of the device counted; nil otherwise.
	DeviceFree *int64 `json:"device_free,omitempty"`
}

// Segment is one driver allocation: a pool segment the pool carves blocks
// from (kind "small" or "large", the pool's two arenas), an AllocSync
// buffer ("sync"), or an allocation made in a capture ("graph").
type Segment struct {
	Ptr  driver.DevicePtr `json:"ptr"`
	Size int64            `json:"size"`
	Kind string           `json:"kind"`
	// Graph, for kind "graph": the GraphInfo.ID of the graph (or the
	// capture recording) that owns it.
	Graph  int     `json:"graph"`
	Blocks []Block `json:"blocks"`
	// Expandable: an arena's expandable range (alloc.Options.ExpandableSegments).
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
	// Graphs lists the graphs (GraphInfo.ID) whose recorded work uses the
	// block: it is held while they live.
	Graphs []int `json:"graphs,omitempty"`
	// Pool is the PoolInfo.ID of the graph pool whose memory the block
	// is (0: none); Graph, for a pool's graph-owned block, the graph
	// holding it.
	Pool  int `json:"pool,omitempty"`
	Graph int `json:"graph,omitempty"`
	// CallSite is where the engine allocated the block: the function,
	// file base name and line of the first frame outside the allocator,
	// when the profile sampled the allocation (alloc.SetProfileRate).
	CallSite string `json:"call_site,omitempty"`
}

// GraphInfo is a live graph, or the capture recording now (Capturing),
// with the memory it owns and the memory it keeps from being reused.
type GraphInfo struct {
	// ID is alloc.Graph.ID: given when the capture began, never given
	// again in the process. Name is alloc.CaptureOptions.Name.
	ID        int    `json:"id"`
	Name      string `json:"name,omitempty"`
	Pool      int    `json:"pool,omitempty"` // the PoolInfo.ID it captured into; 0: none
	Capturing bool   `json:"capturing,omitempty"`
	Eager     bool   `json:"eager,omitempty"` // an eager fallback: owns nothing
	Launched  bool   `json:"launched,omitempty"`
	Launches  uint64 `json:"launches"` // Graph.Launch calls that ran it
	// Owned: allocated in its capture (from its pool, when it has one),
	// its own until Graph.Close.
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

// PoolInfo is a graph pool (alloc.GraphPool): the memory it borrowed
// from the allocator's cache, what of it is free for its next captures,
// and its graphs. Its blocks are the segments' blocks whose Pool is its
// ID.
type PoolInfo struct {
	ID     int    `json:"id"` // alloc.GraphPool's, never given again in the process
	Name   string `json:"name,omitempty"`
	Closed bool   `json:"closed,omitempty"` // closed: its memory goes back with its last graph
	// Bytes is what it borrowed (alloc.GraphPool.Bytes), in Borrowed
	// blocks of the allocator's segments; FreeBytes, in FreeBlocks, is
	// free for its next captures (BlockGraphPool); the rest its graphs
	// hold.
	Bytes      int64 `json:"bytes"`
	Borrowed   int   `json:"borrowed_blocks"`
	FreeBytes  int64 `json:"free_bytes"`
	FreeBlocks int   `json:"free_blocks"`
	Graphs     []int `json:"graphs"` // the GraphInfo.ID of each of its live graphs and its capture
}

// Label is how views name a graph: "batch-8 (graph 12)", or "graph 12"
// without a name.
func (g GraphInfo) Label() string { return label(g.Name, "graph", g.ID) }

// Kind says what sets g apart from a replayed graph: "recording" (the
// capture recording now), "eager fallback", or "".
func (g GraphInfo) Kind() string {
	switch {
	case g.Capturing:
		return "recording"
	case g.Eager:
		return "eager fallback"
	}
	return ""
}

// Label is how views name a pool: "decode (pool 3)", or "pool 3".
func (p PoolInfo) Label() string { return label(p.Name, "pool", p.ID) }

func label(name, kind string, id int) string {
	if name == "" {
		return fmt.Sprintf("%s %d", kind, id)
	}
	return fmt.Sprintf("%s (%s %d)", name, kind, id)
}

// GraphBytes is the memory graphs hold: the bytes of the states whose
// Graphs is true.
func (s Snapshot) GraphBytes() int64 {
	var n int64
	for st, b := range s.Bytes {
		if st.Graphs() {
			n += b
		}
	}
	return n
}

// Fragmentation is the fragmentation of the memory graphs do not hold:
// bytes reserved over bytes in use, graphs' memory (GraphBytes,
// GraphInUse) left out of both, since a graph keeps its memory by design
// however little of it holds live buffers. 1 when every such reserved
// byte is in a live buffer, more as the pool caches or splits more, 0
// when nothing outside graphs is in use.
func (s Snapshot) Fragmentation() float64 {
	return ratio(s.Stats.BytesReserved-s.GraphBytes(), s.Stats.BytesInUse-s.GraphInUse)
}

func ratio(reserved, inUse int64) float64 {
	if inUse <= 0 {
		return 0
	}
	return float64(reserved) / float64(inUse)
}

// Stats is an allocator's counters at one moment: what alloc.Stats is
// (an alias) and what a Snapshot carries.
type Stats struct {
	BytesInUse    int64  `json:"bytes_in_use"`   // bytes of live buffers, as requested
	BytesReserved int64  `json:"bytes_reserved"` // bytes held from the driver: live, cached and graph-owned
	BytesCached   int64  `json:"bytes_cached"`   // reserved and not in use: the pool's free blocks, states cached-fragment and cached-segment
	PeakInUse     int64  `json:"peak_in_use"`
	PeakReserved  int64  `json:"peak_reserved"`
	LiveBuffers   int    `json:"live_buffers"`
	Allocs        uint64 `json:"allocs"` // successful Alloc, AllocSync and workspace allocations
	Frees         uint64 `json:"frees"`
	PoolHits      uint64 `json:"pool_hits"`
	PoolMisses    uint64 `json:"pool_misses"`
	DriverAllocs  uint64 `json:"driver_allocs"`
	DriverFrees   uint64 `json:"driver_frees"`
	CaptureAllocs uint64 `json:"capture_allocs"` // allocations made inside captures, all captures
	Captures      uint64 `json:"captures"`       // captures ended with a graph
	FailedCapture uint64 `json:"failed_capture"` // captures that ended without a graph
	LiveGraphs    int    `json:"live_graphs"`
	HostBuffers   int    `json:"host_buffers"`
	HostBytes     int64  `json:"host_bytes"` // pinned host memory in use, as requested
	// HostCached is pinned host memory kept for reuse by the allocator's
	// host cache (freed buffers' classes, carved chunks' unused slots);
	// HostPins counts the pinnings (driver host allocations) it made.
	HostCached int64  `json:"host_cached_bytes"`
	HostPins   uint64 `json:"host_pins"`
	Timeouts   uint64 `json:"timeouts"` // watchdog expiries
	// OutOfMemory counts allocations (Alloc, AllocSync, workspaces, in
	// captures or not) that failed for lack of device memory, each after
	// the reclaim ladder; ReclaimRetries counts the ladder's retries: an
	// allocation or mapping tried again after a rung gave memory back
	// (docs/device-memory.md, "Out of memory").
	OutOfMemory    uint64 `json:"out_of_memory"`
	ReclaimRetries uint64 `json:"reclaim_retries"`
	// MemoryLimit is the most BytesReserved may be (Options.MemoryLimit,
	// Options.MemoryFraction); 0: no limit but the device's.
	MemoryLimit int64 `json:"memory_limit"`
}

// Fragmentation is bytes reserved over bytes in use: 1 when every
// reserved byte is in a live buffer, more as the pool caches or splits
// more, and 0 when nothing is in use (the ratio is undefined there).
// Graphs' memory counts here; the views report Snapshot.Fragmentation,
// which leaves it out.
func (s Stats) Fragmentation() float64 { return ratio(s.BytesReserved, s.BytesInUse) }

func (s Stats) String() string {
	return fmt.Sprintf("in use %d B in %d buffers (peak %d B), reserved %d B (peak %d B), cached %d B, graphs %d, host %d B in %d buffers",
		s.BytesInUse, s.LiveBuffers, s.PeakInUse, s.BytesReserved, s.PeakReserved, s.BytesCached, s.LiveGraphs, s.HostBytes, s.HostBuffers)
}
