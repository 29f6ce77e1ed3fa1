package alloc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// WriteHistory writes the allocator's allocation timeline as JSON
// (memmap.History): every event it keeps, oldest first, each with its
// time, size, address, state, the bytes in use and reserved after it, and
// its call stack from the engine's call into the allocator. With
// Options.History 0 (the default) nothing is recorded and the history
// written is empty, with Capacity 0. It works after Close too: the
// events stay.
func (a *Allocator) WriteHistory(w io.Writer) error {
	return encodeHistory(w, readHistory(a, -1))
}

// readHistory is a's newest maxEvents events (every event it keeps when
// maxEvents < 0), oldest first, with their stacks symbolized:
// WriteHistory's history, bounded. The history's lock, which the
// allocator's events take, is held while the window is copied (256 B an
// event) and for nothing else; Truncated counts the kept events the
// window leaves out. It works after Close too.
func readHistory(a *Allocator, maxEvents int) memmap.History {
	var w historyWindow
	if h := a.stats.hist; h != nil {
		w = h.copyOut(nil, maxEvents)
	}
	return historyData(a, w)
}

// encodeHistory writes d as JSON, encoded once.
func encodeHistory(w io.Writer, d memmap.History) error {
	return json.NewEncoder(w).Encode(d)
}

// historyData is a's history of the window w copied out of its ring,
// symbolized (without the ring's lock).
func historyData(a *Allocator, w historyWindow) memmap.History {
	d := memmap.History{Allocator: a.name, Backend: a.backend, Device: a.info.Name, Events: []memmap.Event{}, Stacks: [][]memmap.Frame{}}
	h := a.stats.hist
	if h == nil {
		return d
	}
	evs := w.events
	d.Start, d.Format, d.Capacity, d.Recorded, d.Resolution = h.start, memmap.HistoryFormat, h.capacity, w.recorded, historyTick
	d.Truncated = w.kept - len(evs)
	d.File = h.file.status()
	d.Events = make([]memmap.Event, len(evs))
	byPCs := map[[historyStack]uintptr]int{}
	byFrames := map[string]int{} // stacks that differ only in the allocator's frames are one
	for i := range evs {
		e := &evs[i]
		stk := -1
		if e.npc > 0 {
			var ok bool
			if stk, ok = byPCs[e.pcs]; !ok {
				fs := engineFrames(e.pcs[:e.npc])
				k := fmt.Sprint(fs)
				if stk, ok = byFrames[k]; !ok {
					stk = len(d.Stacks)
					byFrames[k] = stk
					d.Stacks = append(d.Stacks, fs)
				}
				byPCs[e.pcs] = stk
			}
		}
		d.Events[i] = eventData(e, w.recorded-uint64(len(evs)-i), stk)
	}
	return d
}

// eventData is ring slot e as the history's event seq, its stack stk:
// the slot's tag and the IDs it keeps in addr and detail (event) are
// written in the fields of the kinds they belong to.
func eventData(e *event, seq uint64, stk int) memmap.Event {
	d := memmap.Event{Seq: seq, Time: time.Duration(e.t), Kind: eventKinds[e.kind], Size: e.size,
		State: eventStates[e.state], Graph: int(e.graph), InUse: e.inUse, Reserved: e.reserved, Stack: stk}
	switch e.kind {
	case evCaptureBegin, evPoolClose:
		d.Pool = int(e.addr)
		d.Detail = e.detail
	case evAlloc:
		d.Addr, d.Via = e.addr, eventVias[e.via]
		if e.via == viaWorkspace {
			d.Workspace = e.detail
		}
	case evOutOfMemory:
		d.Via, d.Detail = eventVias[e.via], e.detail
	default:
		d.Addr, d.Detail = e.addr, e.detail
	}
	return d
}

// allocPkg prefixes the functions of package alloc itself (not its
// subpackages, nor its tests'), which an event's stack leaves out.
const allocPkg = "github.com/capalloc/capalloc/alloc."

// engineFrames symbolizes a stack, inlined calls included
// (physicalFrames, pprof.go), from the first frame outside package alloc.
func engineFrames(pcs []uintptr) []memmap.Frame {
	var out []memmap.Frame
	for _, fs := range physicalFrames(pcs) {
		for _, f := range fs {
			if len(out) == 0 && strings.HasPrefix(f.Function, allocPkg) {
				continue
			}
			out = append(out, memmap.Frame{Function: f.Function, File: f.File, Line: f.Line})
		}
	}
	return slices.Clip(out)
}

// dumpHistoryLocked hands Options.HistoryFile's writer the history at an
// out-of-memory error: the ring copied under its lock (so the file shows
// the moment of the error), written in the background (history_file.go)
// so that no file is touched while a.mu is held. Caller holds a.mu.
func dumpHistoryLocked(a *Allocator) {
	if h := a.stats.hist; h != nil && h.file != nil {
		h.file.submit(h)
	}
}

// FlushHistoryFiles waits until no write of an open allocator's
// Options.HistoryFile is pending or in progress, so that each file holds
// its allocator's latest out-of-memory error, and returns those writes'
// errors, joined (nil when they succeeded, or when nothing was written).
// An engine that exits on an out-of-memory error calls it (or Close, which
// waits for its allocator's write) first.
func FlushHistoryFiles() error {
	var errs []error
	for _, a := range allocators() {
		errs = append(errs, a.stats.hist.flushFile())
	}
	return errors.Join(errs...)
}
