package alloc

import (
	"errors"
	"fmt"
	"time"

	"github.com/capalloc/capalloc/alloc/driver"
)

// endLocked ends capture c on the driver, with a.mu released for the
// driver call, and builds the graph. Past timeout the caller gets
// ErrCaptureTimeout, the capture stays abandoned (operations on the
// allocator say so) and is finished, its graph discarded, when the driver
// returns. Caller holds a.mu; releases wait for releases.flush.
func (c *capture) endLocked(timeout time.Duration) (*Graph, error) {
	a := c.a
	g := &a.guard
	done := g.transitionLocked()
	defer done()
	var h driver.GraphHandle
	a.mu.Unlock()
	expired, err := g.watchdog.run("EndCapture", timeout, func() (err error) {
		h, err = g.drv.EndCapture(g.stream)
		return err
	}, func(err error) {
		a.mu.Lock()
		if gr := c.finishLocked(h, err); gr != nil {
			gr.closeLocked()
		}
		a.mu.Unlock()
		a.releases.flushWith(a.releases.cleanupLate)
		a.finishClose(a.releases.cleanupLate)
	})
	a.mu.Lock()
	if expired {
		c.abandoned = true
		return nil, err
	}
	gr := c.finishLocked(h, err)
	if gr == nil {
		return nil, c.err
	}
	return gr, nil
}

// finishLocked records the end of c, whose driver end returned h and err,
// and instantiates its graph. On failure it returns nil, leaves the error
// in c.err and releases what the capture took. Caller holds a.mu.
func (c *capture) finishLocked(h driver.GraphHandle, err error) *Graph {
	a := c.a
	g := &a.guard
	g.dom.remove(g.stream)
	if g.cap == c {
		g.setCapLocked(nil, &a.lane)
	}
	g.lastCap = c
	var exec driver.GraphExec
	if err == nil {
		autoFree := false
		for _, b := range c.blocks {
			autoFree = autoFree || !b.freedInGraph
		}
		if err = g.strictRelaxedLocked("graph instantiation"); err != nil {
			err = errors.Join(err, g.drv.GraphDestroy(h))
		} else if exec, err = g.drv.GraphInstantiate(h, autoFree); err != nil {
			err = errors.Join(err, g.drv.GraphDestroy(h))
		}
	}
	if err != nil {
		c.err = err
		a.stats.FailedCapture++
		if h := a.stats.hist; h != nil {
			h.record(evCaptureEnd, 0, 0, graphTag(c.id), "failed: "+err.Error())
		}
		c.discardLocked(false)
		return nil
	}
	gr := &Graph{a: a, h: h, exec: exec, cap: c, id: c.id, name: c.name}
	for _, name := range c.lazyWS {
		gr.warnings = append(gr.warnings, fmt.Sprintf("workspace %q was first allocated inside the capture; reserve it before capturing", name))
	}
	if w := c.poolWarning(); w != "" {
		gr.warnings = append(gr.warnings, w)
	}
	a.graphs[gr] = struct{}{}
	a.stats.Captures++
	if h := a.stats.hist; h != nil {
		h.record(evCaptureEnd, 0, 0, graphTag(c.id), "")
	}
	return gr
}

// discardLocked releases what c took. launched says whether a graph
// launch materialized its allocations (then those the graph did not free
// must be freed explicitly; otherwise the driver released them with the
// graph). Deferred frees are released (pooled ones to the pool, AllocSync
// ones queued for releases.flush), and the references c held on buffers from
// before it are dropped. Caller holds a.mu.
func (c *capture) discardLocked(launched bool) {
	a := c.a
	for _, b := range c.blocks {
		if b.live() {
			a.retireLocked(b)
		}
		b.materialized = launched && !b.freedInGraph
		a.releases.releaseLocked(b)
	}
	for _, name := range c.lazyWS {
		if ws := a.workspaces[name]; ws != nil && ws.kind == kindGraph && !ws.live() {
			delete(a.workspaces, name)
		}
	}
	for _, b := range c.deferred {
		a.releases.releaseLocked(b)
	}
	for _, b := range c.refs {
		a.releases.unrefLocked(b)
	}
	a.host.unrefLocked(c.hostRefs)
	c.discardPooledLocked(a)
	c.blocks, c.deferred, c.refs, c.hostRefs = nil, nil, nil, nil
}
