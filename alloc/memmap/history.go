package memmap

import (
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// EventKind is what happened in an allocator, in its History.
type EventKind string

const (
	// EventAlloc: a buffer handed out (Alloc, AllocSync, Workspace, or an
	// allocation in a capture). State says whose it is.
	EventAlloc EventKind = "alloc"
	// EventFree: a buffer's life ended (Free, ReleaseWorkspace, or
	// Graph.Close releasing what its capture allocated).
	EventFree EventKind = "free"
	// EventSegmentMap: memory taken from the driver: a pool segment, an
	// AllocSync buffer, an allocation in a capture, or physical memory
	// mapped into an expandable range.
	EventSegmentMap EventKind = "segment-map"
	// EventSegmentUnmap: memory given back to the driver.
	EventSegmentUnmap EventKind = "segment-unmap"
	// EventCaptureBegin and EventCaptureEnd bracket a capture; an end
	// whose capture gave no graph says "failed" in Detail.
	EventCaptureBegin EventKind = "capture-begin"
	EventCaptureEnd   EventKind = "capture-end"
	// EventGraphClose: a graph closed (Graph.Close, or the allocator's
	// Close); the frees of what it owned follow it.
	EventGraphClose EventKind = "graph-close"
	// EventOutOfMemory: a request failed for want of device memory;
	// Detail says why, Size is the request (-1 when not known).
	EventOutOfMemory EventKind = "out-of-memory"
	// EventPoolClose: a graph pool closed (GraphPool.Close); Pool says
	// which. Its memory goes back to the allocator's cache once its last
	// graph is closed too.
	EventPoolClose EventKind = "pool-close"
)

// HistoryFormat is the format of the histories this package's writers
// write (History.Format): 2, whose events say which call made an
// allocation (Event.Via, Event.Workspace), which graph owns it
// (Event.Graph) and which graph pool a capture shares (Event.Pool), and
// which record GraphPool.Close (EventPoolClose). A history without the
// field (0) is older: it says none of these.
const HistoryFormat = 2

// AllocVia is the call that made an EventAlloc's buffer, or made an
// EventOutOfMemory's failed request, when it was not Alloc (Event.Via).
type AllocVia string

const (
	// ViaAllocSync: AllocSync, the eager synchronous allocation.
	ViaAllocSync AllocVia = "alloc-sync"
	// ViaWorkspace: Workspace; Event.Workspace is its name.
	ViaWorkspace AllocVia = "workspace"
)

// History is an allocator's latest events, oldest first, as
// alloc.Allocator.WriteHistory writes it (JSON): the allocation timeline
// (alloc.Options.History).
type History struct {
	Allocator string    `json:"allocator"`
	Backend   string    `json:"backend"`
	Device    string    `json:"device"`
	Start     time.Time `json:"start"` // when recording began: events' times count from it
	// Format is HistoryFormat for a history that says what each
	// allocation was (which call, which graph, which graph pool); 0 for
	// an older one, which does not.
	Format int `json:"format,omitempty"`
	// Capacity is how many events the history keeps (alloc.Options.History):
	// 0 when it is off. Recorded counts every event since Start; the
	// Recorded - len(Events) oldest are not listed: Truncated of them are
	// still kept but older than the window a view asked for (allocview's
	// max_events), the rest are gone from the ring.
	Capacity  int    `json:"capacity"`
	Recorded  uint64 `json:"recorded"`
	Truncated int    `json:"truncated,omitempty"`
	// Resolution is the step of the events' clock: a tick, not a clock
	// read per event, which would cost more than the allocation.
	Resolution time.Duration `json:"resolution_ns"`
	Events     []Event       `json:"events"`
	// Stacks are the events' call stacks, innermost frame first, starting
	// at the engine's call into the allocator (its own frames left out).
	Stacks [][]Frame `json:"stacks"`
	// File is how the writes of alloc.Options.HistoryFile went, when it
	// is set.
	File *HistoryFile `json:"file,omitempty"`
}

// HistoryFile is how an allocator's writes of its history file
// (alloc.Options.HistoryFile, at each out-of-memory error) went.
type HistoryFile struct {
	Path    string `json:"path"`
	Written uint64 `json:"written"` // files written whole
	// Failed counts the writes that failed or were refused (a target
	// that is not a regular file, a directory others may write to);
	// Error is the latest one's error.
	Failed uint64 `json:"failed"`
	Error  string `json:"error,omitempty"`
}

// Event is one thing that happened in an allocator.
type Event struct {
	Seq  uint64           `json:"seq"`  // 0 for the first event since History.Start
	Time time.Duration    `json:"t_ns"` // since History.Start
	Kind EventKind        `json:"kind"`
	Addr driver.DevicePtr `json:"addr,omitempty"`
	Size int64            `json:"size"`
	// State, for EventAlloc and EventFree: BlockLive, BlockWorkspace
	// (when known at the time) or BlockGraphOwned (an allocation in a
	// capture, into the graph's own memory or its graph pool's).
	State BlockState `json:"state,omitempty"`
	// Via, for EventAlloc, is the call that made the buffer when it was
	// not Alloc (AllocSync, Workspace), and Workspace the workspace's
	// name; for EventOutOfMemory, the call that failed.
	Via       AllocVia `json:"via,omitempty"`
	Workspace string   `json:"workspace,omitempty"`
	// Graph is the graph's ID (alloc.Graph.ID): of the capture that
	// began or ended, of the graph that closed, of the graph that owns a
	// graph-owned buffer. 0: none (or an older history).
	Graph int `json:"graph,omitempty"`
	// Pool is the graph pool's ID: the pool an EventCaptureBegin's
	// capture shares, the pool an EventPoolClose closed. 0: none.
	Pool int `json:"pool,omitempty"`
	// InUse and Reserved are the allocator's bytes in use (buffers, as
	// requested) and taken from the driver right after the event.
	InUse    int64  `json:"in_use"`
	Reserved int64  `json:"reserved"`
	Detail   string `json:"detail,omitempty"`
	Stack    int    `json:"stack"` // index into History.Stacks; -1: none
}

// Frame is one call in a stack: an inlined call is a frame of its own.
type Frame struct {
	Function string `json:"function"`
	File     string `json:"file"`
	Line     int    `json:"line"`
}
