package main

import (
	"strings"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// Captures, graphs and graph pools, replayed as the engine made them: a
// capture-begin begins a capture on the replay's allocator (into the
// replay's pool of the recorded pool, made at its first capture), the
// allocations until capture-end are made in it, the graph holds what it
// owns until its graph-close, and a pool-close closes the pool, whose
// memory goes back when its last graph closes too, as the engine's did.

// graphEvent replays capture-begin, capture-end, graph-close and
// pool-close.
func (p *replayer) graphEvent(e memmap.Event) {
	switch e.Kind {
	case memmap.EventCaptureBegin:
		p.begin(e)
	case memmap.EventCaptureEnd:
		p.end(e)
	case memmap.EventGraphClose:
		if g := p.graphs[e.Graph]; g != nil {
			delete(p.graphs, e.Graph)
			_ = g.Close()
			p.releaseGraph(e.Graph)
		}
	case memmap.EventPoolClose:
		if gp := p.pools[e.Pool]; gp != nil {
			delete(p.pools, e.Pool)
			_ = gp.Close()
		}
	}
}

// begin begins e's capture on the replay's allocator, in its mode and
// graph pool. One it cannot begin is a fallback: its allocations are
// eager.
func (p *replayer) begin(e memmap.Event) {
	if p.capturing != 0 {
		p.r.fallback(fallbackNested)
		return
	}
	mode, err := driver.ParseCaptureMode(e.Detail)
	if err != nil {
		p.r.fallback(fallbackMode)
		mode = alloc.Global
	}
	if e.Pool != 0 {
		gp := p.pools[e.Pool]
		if gp == nil {
			gp = p.a.NewGraphPool()
			p.pools[e.Pool] = gp
			p.r.pools++
		}
		err = gp.BeginCapture(mode)
	} else {
		err = p.a.BeginCapture(mode)
	}
	if err != nil {
		p.r.fallback(fallbackBegin)
		return
	}
	p.capturing = e.Graph
	p.r.captures++
}

// end ends the capture e ends. A capture that failed in the history is
// discarded in the replay too; one whose end differs (it failed in one
// and not the other) is a fallback.
func (p *replayer) end(e memmap.Event) {
	if p.capturing == 0 || p.capturing != e.Graph {
		return // its begin was not replayed: its allocations were eager
	}
	p.capturing = 0
	g, err := p.a.EndCapture()
	failed := strings.HasPrefix(e.Detail, "failed")
	switch {
	case err == nil && !failed:
		p.graphs[e.Graph] = g
		return
	case err == nil:
		p.r.fallback(fallbackEnd)
		_ = g.Close()
	case !failed:
		p.r.fallback(fallbackEnd)
	}
	p.releaseGraph(e.Graph) // the allocator released what the capture took
}

// endOpenCapture ends a capture the history ends in.
func (p *replayer) endOpenCapture() {
	if p.capturing == 0 {
		return
	}
	if g, err := p.a.EndCapture(); err == nil {
		_ = g.Close()
	}
	p.releaseGraph(p.capturing)
	p.capturing = 0
}

// releaseGraph forgets the buffers of graph id the replay still holds:
// their graph's close (or failed capture) freed them, and their recorded
// frees follow.
func (p *replayer) releaseGraph(id int) {
	for _, addr := range p.owned[id] {
		h, ok := p.live[addr]
		if !ok || h.graph != id {
			continue
		}
		delete(p.live, addr)
		p.released[addr] = true
		if h.workspace != "" && p.workspaces[h.workspace] == addr {
			delete(p.workspaces, h.workspace)
		}
	}
	delete(p.owned, id)
}
