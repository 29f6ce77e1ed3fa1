package memmap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Reading a history back (cmd/allocview, cmd/allocreplay): a history file
// comes from another machine or another process (Options.HistoryFile,
// WriteHistory, the history.json view), so it is untrusted input: its
// size and counts are bounded, every field is checked, and a bad one is
// an error wrapping ErrInvalidHistory (or ErrHistoryTooLarge) that says
// where.

var (
	// ErrInvalidHistory: the input is not a history alloc wrote: not JSON
	// of its shape, or a field out of its range (an unknown event kind, a
	// stack index past the stacks, sequence numbers not increasing ...).
	ErrInvalidHistory = errors.New("memmap: invalid history")
	// ErrHistoryTooLarge: the input is past HistoryLimits.
	ErrHistoryTooLarge = errors.New("memmap: history too large")
)

// HistoryLimits bound what ReadHistories accepts.
type HistoryLimits struct {
	Bytes  int64 // the input's size
	Events int   // events, all histories together
	Stacks int   // stacks, all histories together
	Frames int   // frames of one stack
	Text   int   // bytes of one name, file, function or detail
}

// DefaultHistoryLimits hold any history an allocator keeps of up to
// about a million events (Options.History) with its stacks.
var DefaultHistoryLimits = HistoryLimits{Bytes: 512 << 20, Events: 4 << 20, Stacks: 1 << 20, Frames: 256, Text: 4096}

// ReadHistories reads the histories in r: one History (WriteHistory,
// Options.HistoryFile, history.json?allocator=NAME) or a JSON array of
// them (history.json for every allocator). Each is checked (Validate)
// against lim.
func ReadHistories(r io.Reader, lim HistoryLimits) ([]History, error) {
	data, err := io.ReadAll(io.LimitReader(r, lim.Bytes+1))
	if err != nil {
		return nil, fmt.Errorf("memmap: reading a history: %w", err)
	}
	if int64(len(data)) > lim.Bytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrHistoryTooLarge, lim.Bytes)
	}
	var hs []History
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		err = json.Unmarshal(data, &hs)
	} else {
		hs = make([]History, 1)
		err = json.Unmarshal(data, &hs[0])
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidHistory, err)
	}
	events, stacks := 0, 0
	for i := range hs {
		events += len(hs[i].Events)
		stacks += len(hs[i].Stacks)
		if events > lim.Events || stacks > lim.Stacks {
			return nil, fmt.Errorf("%w: more than %d events or %d stacks", ErrHistoryTooLarge, lim.Events, lim.Stacks)
		}
		if err := hs[i].Validate(lim); err != nil {
			if len(hs) > 1 {
				err = fmt.Errorf("history %d: %w", i, err)
			}
			return nil, err
		}
	}
	return hs, nil
}

// ReadHistoryFile reads the histories in the file named name, as
// ReadHistories does; its errors name the file.
func ReadHistoryFile(name string, lim HistoryLimits) ([]History, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	hs, err := ReadHistories(f, lim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return hs, nil
}

// validStates are the states an alloc or free event may carry.
var validStates = map[BlockState]bool{"": true, BlockLive: true, BlockWorkspace: true, BlockGraphOwned: true, BlockGraphPool: true, BlockHeldForGraph: true}

var validKinds = map[EventKind]bool{EventAlloc: true, EventFree: true, EventSegmentMap: true, EventSegmentUnmap: true,
	EventCaptureBegin: true, EventCaptureEnd: true, EventGraphClose: true, EventOutOfMemory: true, EventPoolClose: true}

var validVias = map[AllocVia]bool{"": true, ViaAllocSync: true, ViaWorkspace: true}

// graphKinds are the kinds whose events may name a graph (Event.Graph);
// poolKinds, a graph pool (Event.Pool).
var (
	graphKinds = map[EventKind]bool{EventAlloc: true, EventFree: true, EventCaptureBegin: true, EventCaptureEnd: true, EventGraphClose: true}
	poolKinds  = map[EventKind]bool{EventCaptureBegin: true, EventPoolClose: true}
)

// checkOwners checks e's fields of HistoryFormat (Via, Workspace, Graph,
// Pool): known values, each only on the kinds it belongs to. It returns
// what is wrong, "" for nothing.
func checkOwners(e *Event, format int) string {
	switch {
	case format < HistoryFormat && (e.Via != "" || e.Workspace != "" || e.Graph != 0 || e.Pool != 0 || e.Kind == EventPoolClose):
		return fmt.Sprintf("%s: via, workspace, graph, pool and pool-close need format %d, the history is format %d", e.Kind, HistoryFormat, format)
	case !validVias[e.Via]:
		return fmt.Sprintf("via %q", e.Via)
	case e.Via != "" && e.Kind != EventAlloc && e.Kind != EventOutOfMemory:
		return fmt.Sprintf("via %q on a %s event", e.Via, e.Kind)
	case (e.Workspace != "") != (e.Via == ViaWorkspace && e.Kind == EventAlloc):
		return fmt.Sprintf("%s: workspace %q, via %q: a name is a workspace allocation's, and a workspace allocation has one", e.Kind, e.Workspace, e.Via)
	case e.Graph < 0 || e.Pool < 0:
		return fmt.Sprintf("graph %d, pool %d", e.Graph, e.Pool)
	case e.Graph != 0 && !graphKinds[e.Kind]:
		return fmt.Sprintf("graph %d on a %s event", e.Graph, e.Kind)
	case e.Pool != 0 && !poolKinds[e.Kind]:
		return fmt.Sprintf("pool %d on a %s event", e.Pool, e.Kind)
	case format >= HistoryFormat && (e.Kind == EventAlloc || e.Kind == EventFree) && (e.Graph != 0) != (e.State == BlockGraphOwned):
		return fmt.Sprintf("%s of state %q with graph %d: graph-owned memory, and only it, has a graph", e.Kind, e.State, e.Graph)
	case e.Kind == EventPoolClose && e.Pool == 0:
		return "pool-close without its pool"
	case format >= HistoryFormat && e.Graph == 0 && (e.Kind == EventCaptureBegin || e.Kind == EventCaptureEnd || e.Kind == EventGraphClose):
		return fmt.Sprintf("%s without its graph", e.Kind)
	}
	return ""
}

// Validate checks h as ReadHistories does: its counts and text within
// lim, and every field in its range, events in order. The error wraps
// ErrInvalidHistory or ErrHistoryTooLarge and names the first bad field.
func (h *History) Validate(lim HistoryLimits) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidHistory, fmt.Sprintf(format, args...))
	}
	for _, s := range []string{h.Allocator, h.Backend, h.Device} {
		if len(s) > lim.Text {
			return fmt.Errorf("%w: a name of %d bytes (at most %d)", ErrHistoryTooLarge, len(s), lim.Text)
		}
	}
	switch {
	case len(h.Events) > lim.Events || len(h.Stacks) > lim.Stacks:
		return fmt.Errorf("%w: %d events, %d stacks (at most %d, %d)", ErrHistoryTooLarge, len(h.Events), len(h.Stacks), lim.Events, lim.Stacks)
	case h.Capacity < 0:
		return bad("capacity %d", h.Capacity)
	case h.Recorded < uint64(len(h.Events)):
		return bad("recorded %d, fewer than its %d events", h.Recorded, len(h.Events))
	case h.Resolution < 0:
		return bad("resolution %v", h.Resolution)
	case h.Format < 0 || h.Format > HistoryFormat:
		return bad("format %d (this reader knows formats 0 to %d)", h.Format, HistoryFormat)
	}
	for i, fs := range h.Stacks {
		if len(fs) > lim.Frames {
			return fmt.Errorf("%w: stack %d has %d frames (at most %d)", ErrHistoryTooLarge, i, len(fs), lim.Frames)
		}
		for j, f := range fs {
			if len(f.Function) > lim.Text || len(f.File) > lim.Text {
				return fmt.Errorf("%w: stack %d frame %d: a name past %d bytes", ErrHistoryTooLarge, i, j, lim.Text)
			}
			if f.Line < 0 {
				return bad("stack %d frame %d: line %d", i, j, f.Line)
			}
		}
	}
	var prev *Event
	for i := range h.Events {
		e := &h.Events[i]
		where := fmt.Sprintf("event %d (seq %d)", i, e.Seq)
		switch {
		case !validKinds[e.Kind]:
			return bad("%s: kind %q", where, e.Kind)
		case !validStates[e.State]:
			return bad("%s: state %q", where, e.State)
		case e.Time < 0:
			return bad("%s: time %v", where, e.Time)
		case e.InUse < 0 || e.Reserved < 0:
			return bad("%s: in use %d, reserved %d", where, e.InUse, e.Reserved)
		case e.Stack < -1 || e.Stack >= len(h.Stacks):
			return bad("%s: stack %d of %d", where, e.Stack, len(h.Stacks))
		case len(e.Detail) > lim.Text:
			return fmt.Errorf("%w: %s: a detail of %d bytes (at most %d)", ErrHistoryTooLarge, where, len(e.Detail), lim.Text)
		case len(e.Workspace) > lim.Text:
			return fmt.Errorf("%w: %s: a workspace name of %d bytes (at most %d)", ErrHistoryTooLarge, where, len(e.Workspace), lim.Text)
		case prev != nil && e.Seq <= prev.Seq:
			return bad("%s: after seq %d", where, prev.Seq)
		case prev != nil && e.Time < prev.Time:
			return bad("%s: time %v before the previous event's %v", where, e.Time, prev.Time)
		}
		if why := checkOwners(e, h.Format); why != "" {
			return bad("%s: %s", where, why)
		}
		switch e.Kind {
		case EventAlloc, EventFree:
			if e.Size <= 0 || e.Addr == 0 {
				return bad("%s: %s of %d B at %#x", where, e.Kind, e.Size, uint64(e.Addr))
			}
		case EventOutOfMemory:
			if e.Size < -1 {
				return bad("%s: request of %d B", where, e.Size)
			}
		default:
			if e.Size < 0 {
				return bad("%s: size %d", where, e.Size)
			}
		}
		prev = e
	}
	return nil
}
