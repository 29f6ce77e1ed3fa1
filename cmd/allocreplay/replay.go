package main

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// replayer replays one history's events, in order, on a fresh allocator:
// each allocation through the call that made it when the history says
// which (format 2: Via, Graph, Pool), else as an eager Alloc, counted as
// a fallback (result.fallbacks).
type replayer struct {
	a *alloc.Allocator
	r *result
	// asMade: the history says what each allocation was and -eager is
	// off: captures, graph pools, workspaces and AllocSync are replayed
	// as the engine made them (graphs.go).
	asMade bool
	live   map[driver.DevicePtr]held // by the address the history recorded
	// released are the recorded addresses of buffers the replay's
	// allocator freed before their recorded free: by a graph's close or a
	// failed capture (graphs.go), or a workspace replaced by a larger one.
	released   map[driver.DevicePtr]bool
	workspaces map[string]driver.DevicePtr // each live workspace's recorded address
	graphs     map[int]*alloc.Graph        // the replay's graph of each recorded graph ID
	owned      map[int][]driver.DevicePtr  // each replayed graph's buffers, by recorded address
	pools      map[int]*alloc.GraphPool    // the replay's pool of each recorded pool ID
	capturing  int                         // the recorded graph ID of the capture being replayed; 0: none
}

// held is a buffer the replay holds for a recorded one.
type held struct {
	buf       alloc.Buffer
	graph     int    // the replayed graph that owns it: its Close frees it; 0: none
	workspace string // the workspace it is; "": none
}

func newReplayer(a *alloc.Allocator, r *result, asMade bool) *replayer {
	return &replayer{a: a, r: r, asMade: asMade, live: map[driver.DevicePtr]held{}, released: map[driver.DevicePtr]bool{},
		workspaces: map[string]driver.DevicePtr{}, graphs: map[int]*alloc.Graph{}, owned: map[int][]driver.DevicePtr{}, pools: map[int]*alloc.GraphPool{}}
}

// event replays e.
func (p *replayer) event(e memmap.Event) error {
	switch e.Kind {
	case memmap.EventAlloc:
		return p.alloc(e)
	case memmap.EventFree:
		return p.free(e)
	case memmap.EventOutOfMemory:
		return p.retry(e)
	case memmap.EventCaptureBegin, memmap.EventCaptureEnd, memmap.EventGraphClose, memmap.EventPoolClose:
		if p.asMade {
			p.graphEvent(e)
		}
	}
	return nil
}

// alloc makes e's allocation through the call the history says made it:
// Workspace, AllocSync, or Alloc (inside the replayed capture for a
// graph-owned buffer). An out-of-memory error is the replay's finding,
// any other error ends the replay.
func (p *replayer) alloc(e memmap.Event) error {
	p.r.allocs++
	if old, ok := p.live[e.Addr]; ok { // its free was not recorded
		delete(p.live, e.Addr)
		p.dispose(e.Addr, old)
	}
	delete(p.released, e.Addr)
	h := held{}
	var err error
	switch via := p.via(e); via {
	case memmap.ViaAllocSync:
		p.r.syncs++
		h.buf, err = p.a.AllocSync(e.Size)
	case memmap.ViaWorkspace:
		p.r.workspaces++
		h.workspace = e.Workspace
		h.buf, err = p.a.Workspace(e.Workspace, e.Size)
		if old, ok := p.workspaces[e.Workspace]; ok && err == nil { // the call replaced it, as the engine's did
			delete(p.live, old)
			p.released[old] = true
		}
	default:
		h.buf, err = p.a.Alloc(e.Size)
	}
	if err != nil {
		if !errors.Is(err, alloc.ErrOutOfMemory) {
			return fmt.Errorf("event %d: %w", e.Seq, err)
		}
		p.r.failedAllocs = append(p.r.failedAllocs, failure{e.Seq, e.Size, err})
		return nil
	}
	if h.workspace != "" {
		p.workspaces[h.workspace] = e.Addr
	}
	if p.asMade && e.State == memmap.BlockGraphOwned && e.Graph == p.capturing {
		h.graph = e.Graph
		p.owned[e.Graph] = append(p.owned[e.Graph], e.Addr)
	}
	p.live[e.Addr] = h
	return nil
}

// via is the call e's allocation is replayed with: the recorded one, or
// "" (Alloc) where the replay cannot make it as the engine did, which is
// counted as a fallback.
func (p *replayer) via(e memmap.Event) memmap.AllocVia {
	switch {
	case !p.asMade:
		return ""
	case e.State == memmap.BlockGraphOwned && (p.capturing == 0 || e.Graph != p.capturing):
		p.r.fallback(fallbackUncaptured)
		return ""
	case e.Via == memmap.ViaWorkspace:
		if old, ok := p.workspaces[e.Workspace]; ok && p.live[old].buf.Size() >= e.Size {
			// Workspace would return the one the replay holds: its free
			// was not recorded.
			p.r.fallback(fallbackWorkspace)
			return ""
		}
	}
	return e.Via
}

// free frees e's buffer as it was made: ReleaseWorkspace for a workspace,
// Free for the rest.
func (p *replayer) free(e memmap.Event) error {
	p.r.frees++
	if p.released[e.Addr] {
		delete(p.released, e.Addr)
		return nil
	}
	h, ok := p.live[e.Addr]
	if !ok {
		p.r.unknownFrees++
		return nil
	}
	delete(p.live, e.Addr)
	if err := p.release(e.Addr, h); err != nil {
		return fmt.Errorf("event %d: %w", e.Seq, err)
	}
	return nil
}

// release frees h, recorded at addr, through the call that frees what
// made it: ReleaseWorkspace for the workspace it still is, Free for the
// rest.
func (p *replayer) release(addr driver.DevicePtr, h held) error {
	if h.workspace != "" && p.workspaces[h.workspace] == addr {
		delete(p.workspaces, h.workspace)
		return p.a.ReleaseWorkspace(h.workspace)
	}
	return p.a.Free(h.buf)
}

// dispose frees h, recorded at addr, at the end of the replay or when
// its address is allocated again without a recorded free; a graph's
// buffer is its graph's to free.
func (p *replayer) dispose(addr driver.DevicePtr, h held) {
	if h.graph == 0 {
		_ = p.release(addr, h)
	}
}

// retry tries a recorded out-of-memory request again at its place,
// through the call that failed (a workspace under a name of the replay's
// own, so that none the history has is replaced), and frees what it got.
func (p *replayer) retry(e memmap.Event) error {
	if e.Size <= 0 {
		return nil
	}
	var (
		b       alloc.Buffer
		err     error
		release = func() { _ = p.a.Free(b) }
	)
	switch via := e.Via; {
	case p.asMade && via == memmap.ViaAllocSync:
		b, err = p.a.AllocSync(e.Size)
	case p.asMade && via == memmap.ViaWorkspace:
		name := "allocreplay: retried request"
		for p.workspaces[name] != 0 {
			name += "'"
		}
		b, err = p.a.Workspace(name, e.Size)
		release = func() { _ = p.a.ReleaseWorkspace(name) }
	default:
		b, err = p.a.Alloc(e.Size)
	}
	if err == nil {
		release() // it failed in the field: nothing kept it
	} else if !errors.Is(err, alloc.ErrOutOfMemory) {
		return fmt.Errorf("event %d: %w", e.Seq, err)
	}
	p.r.ooms = append(p.r.ooms, failure{e.Seq, e.Size, err})
	return nil
}

// close ends what the replay left open: the capture, the graphs and
// pools, the buffers.
func (p *replayer) close() {
	p.endOpenCapture()
	for id, g := range p.graphs {
		_ = g.Close()
		p.releaseGraph(id)
	}
	for _, gp := range p.pools {
		_ = gp.Close()
	}
	for addr, h := range p.live {
		p.dispose(addr, h)
	}
}
