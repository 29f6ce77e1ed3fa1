package alloc

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/internal/callstack"
)

// The allocation timeline (Options.History): a bounded ring of the
// allocator's latest events, each with its time, size, address, state and
// call stack, written as JSON by WriteHistory (history_write.go) and at
// out-of-memory to Options.HistoryFile. Off (the default), every event
// site costs a nil check. On, an event costs a clock load, a frame-pointer
// stack walk (addresses only: symbolized when written) and the ring's
// lock; the events are recorded where their state changes (under a.mu, or
// a shard's lock for the lane's), so the ring's order is the state's.

// historyStack bounds an event's stack: the allocator's own frames, which
// the writer leaves out, and the engine's above them.
const historyStack = 24

// historyEventBytes is a ring slot's size: what each event kept costs.
const historyEventBytes = unsafe.Sizeof(event{})

// historyAhead is how many slots ahead record reads the ring.
const historyAhead = 4

// historyTick is the events' clock step: a ticker advances the clock, as
// a clock read per event would cost more than the allocation.
const historyTick = time.Millisecond

// eventKinds maps the ring's kinds to the data's.
var eventKinds = [...]memmap.EventKind{memmap.EventAlloc, memmap.EventFree, memmap.EventSegmentMap, memmap.EventSegmentUnmap,
	memmap.EventCaptureBegin, memmap.EventCaptureEnd, memmap.EventGraphClose, memmap.EventOutOfMemory, memmap.EventPoolClose}

type eventKind uint8

const (
	evAlloc eventKind = iota
	evFree
	evMap
	evUnmap
	evCaptureBegin
	evCaptureEnd
	evGraphClose
	evOutOfMemory
	evPoolClose
)

// history is an allocator's ring of events. Its lock is a leaf (the lock
// order on Allocator): taken under a.mu or a shard's lock, nothing under it.
type history struct {
	capacity int
	file     *historyFile // Options.HistoryFile's writer (history_file.go): nil when unset
	start    time.Time    // the clock's zero
	clock    atomic.Int64
	stop     chan struct{}
	stopOnce sync.Once

	mu              sync.Mutex
	ring            []event
	next            int    // ring index of the next event
	recorded        uint64 // events ever recorded
	inUse, reserved int64  // running totals, after the latest event
	touched         int64  // the next slot's words, read ahead (record)
}

// event is one ring slot: its fields before the stack fill one cache
// line; the stack's addresses stay unsymbolized. A capture-begin's and a
// pool-close's addr is the graph pool's ID (0: none), as they have no
// address; an alloc's detail is its workspace's name.
type event struct {
	t, size, inUse, reserved int64
	addr                     driver.DevicePtr
	detail                   string
	kind                     eventKind
	npc                      uint8
	state                    eventState // eventTag's fields, unnested: no padding
	via                      eventVia
	graph                    uint32
	pcs                      [historyStack]uintptr
}

// eventTag is what an event says of whose memory it is: an alloc or free
// event's state and origin, and the graph that owns the memory, or whose
// capture or close the event is.
type eventTag struct {
	state eventState
	via   eventVia
	graph uint32 // Graph.ID; 0: none (IDs past 2^32 wrap)
}

// eventVia is the call that made an alloc event's buffer, when it was not
// Alloc: memmap.Event.Via (eventVias).
type eventVia uint8

const (
	viaAlloc eventVia = iota
	viaSync
	viaWorkspace
)

var eventVias = [...]memmap.AllocVia{"", memmap.ViaAllocSync, memmap.ViaWorkspace}

// eventState is an alloc or free event's memmap.BlockState (eventStates),
// a byte in the ring.
type eventState uint8

const (
	stateNone eventState = iota
	stateLive
	stateWorkspace
	stateGraphOwned
)

var eventStates = [...]memmap.BlockState{"", memmap.BlockLive, memmap.BlockWorkspace, memmap.BlockGraphOwned}

// newHistory returns the history of a's options (checked: checkHistory),
// its clock running, or nil when it is off.
func newHistory(a *Allocator) *history {
	opts := a.opts
	if opts.History <= 0 {
		return nil
	}
	h := &history{capacity: opts.History, start: time.Now(), stop: make(chan struct{}),
		ring: make([]event, opts.History)}
	if opts.HistoryFile != "" {
		h.file = newHistoryFile(a, opts.HistoryFile)
	}
	go h.tick()
	return h
}

// checkHistory refuses a history New cannot keep: more than maxHistory
// events (Options.History), or a HistoryFile that would be refused (history_file.go).
func checkHistory(opts Options) error {
	if opts.History > maxHistory {
		return wrapf(ErrInvalidValue, "Options.History %d: more than the maximum, %d events (%d B each)", opts.History, maxHistory, historyEventBytes)
	}
	if opts.History > 0 && opts.HistoryFile != "" {
		return checkHistoryFile(opts.HistoryFile)
	}
	return nil
}

// tick advances the clock until close.
func (h *history) tick() {
	t := time.NewTicker(historyTick)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.clock.Store(int64(now.Sub(h.start)))
		}
	}
}

// close stops the clock (Allocator.Close); the events stay.
func (h *history) close() {
	if h != nil {
		h.stopOnce.Do(func() { close(h.stop) })
	}
}

// record adds an event, its stack starting at record's caller.
//
//go:noinline
func (h *history) record(k eventKind, addr driver.DevicePtr, size int64, tag eventTag, detail string) {
	t := h.clock.Load()
	h.mu.Lock()
	switch k {
	case evAlloc:
		h.inUse += size
	case evFree:
		h.inUse -= size
	case evMap:
		h.reserved += size
	case evUnmap:
		h.reserved -= size
	}
	e := &h.ring[h.next]
	if h.next++; h.next == len(h.ring) {
		h.next = 0
	}
	h.recorded++
	e.t, e.size, e.inUse, e.reserved, e.addr, e.kind = t, size, h.inUse, h.reserved, addr, k
	e.state, e.via, e.graph = tag.state, tag.via, tag.graph
	if e.detail != detail { // a string store only on a change: no write barrier on the common event
		e.detail = detail
	}
	// A slot a few events ahead, read now, is in cache when it is
	// written: a cache miss on the slot written, not hidden, is the
	// larger part of an event's cost in a ring larger than the caches.
	ahead := h.next + historyAhead
	if ahead >= len(h.ring) {
		ahead %= len(h.ring)
	}
	h.touched += h.ring[ahead].t + int64(h.ring[ahead].pcs[7])
	e.npc = uint8(callstack.Callers(1, e.pcs[:]))
	h.mu.Unlock()
}

// tagLive is the tag of an eager Alloc's buffer and its free.
var tagLive = eventTag{state: stateLive}

// blockTag is what a block's events carry: graph-owned, with its graph,
// while a capture's allocation (its own memory or a graph pool's);
// otherwise a workspace or live; and the call that made it.
func blockTag(b *block) eventTag {
	t := tagLive
	switch {
	case (b.kind == kindGraph || b.kind == kindShared) && b.cap != nil:
		t.state, t.graph = stateGraphOwned, uint32(b.cap.id)
	case b.ws != "":
		t.state = stateWorkspace
	}
	switch {
	case b.ws != "":
		t.via = viaWorkspace
	case b.kind == kindSync:
		t.via = viaSync
	}
	return t
}

// graphTag is the tag of a capture's or graph's own event.
func graphTag(id int) eventTag { return eventTag{graph: uint32(id)} }

// historyWindow is a copy of the ring's newest events, oldest first,
// taken under its lock.
type historyWindow struct {
	events   []event
	recorded uint64 // events ever recorded
	kept     int    // events the ring held: len(events) of them copied
}

// copyOut copies the newest max events the ring keeps (every one when max
// < 0) into buf's memory, grown outside the lock when it is short: under
// the lock it copies the window and nothing else.
func (h *history) copyOut(buf []event, max int) historyWindow {
	if max < 0 || max > len(h.ring) {
		max = len(h.ring)
	}
	buf = slices.Grow(buf[:0], max)
	h.mu.Lock()
	defer h.mu.Unlock()
	kept := int(min(h.recorded, uint64(len(h.ring))))
	n := min(kept, max)
	start := h.next - n // the ring index of the window's oldest event
	if start < 0 {
		buf = append(buf, h.ring[len(h.ring)+start:]...)
		start = 0
	}
	buf = append(buf, h.ring[start:h.next]...)
	return historyWindow{buf, h.recorded, kept}
}
