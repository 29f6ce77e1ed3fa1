package cpu

import (
	"github.com/capalloc/capalloc/alloc/driver"
)

// graph is a finished capture. Its op list is immutable, so instantiated
// graphs and launches share it without copying.
type graph struct {
	h         driver.GraphHandle
	ops       opChunks
	allocs    []*allocation // its allocation nodes, freed inside the graph or not
	execs     int           // live instantiations
	pending   int           // queued launches not yet run (counted only with allocs)
	destroyed bool
	mayBlock  bool // a host function among its ops (poll.go)
}

type graphExec struct {
	h        driver.GraphExec
	g        *graph
	ops      opChunks
	autoFree bool
}

// releaseIfUnusedLocked ends the graph's hold on its memory once neither it
// nor an instantiation can run again, queued launches included (their ops
// have its addresses baked in, so releasing earlier could hand a live
// address to someone else, and CUDA lets a queued launch finish). An
// allocation a launch made and nobody freed passes to the caller, like CUDA;
// every other one is released. d.mu held.
func (d *Driver) releaseIfUnusedLocked(g *graph) {
	if !g.destroyed || g.execs > 0 || g.pending > 0 {
		return
	}
	for _, r := range g.allocs {
		if r.graphFreed || !r.materialized {
			d.releaseLocked(r)
		}
		r.graph = nil
	}
	g.allocs = nil
}

// materializeLocked applies a launch's allocation nodes: the allocations the
// graph does not free come alive at their fixed addresses. As in CUDA, a
// relaunch while they are still alive needs autoFree. d.mu held.
func (d *Driver) materializeLocked(e *graphExec, what string) error {
	for _, r := range e.g.allocs {
		if !r.graphFreed && r.materialized && !e.autoFree {
			return errf(driver.ErrInvalidValue,
				"%s: allocation %#x from the previous launch was not freed (instantiate with autoFree)", what, uint64(r.base()))
		}
	}
	for _, r := range e.g.allocs {
		if !r.graphFreed {
			r.materialized = true
		}
	}
	return nil
}

func (d *Driver) GraphInstantiate(gh driver.GraphHandle, autoFree bool) (driver.GraphExec, error) {
	if d.closed.Load() {
		return 0, errClosed("graph instantiate")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.graphs[gh]
	if g == nil {
		return 0, errf(driver.ErrInvalidValue, "graph instantiate: unknown graph %#x", uint64(gh))
	}
	if len(g.allocs) > 0 && g.execs > 0 {
		// CUDA: a graph with memory nodes has at most one instantiation.
		return 0, errf(driver.ErrInvalidValue, "graph instantiate: graph %#x has %d allocation node(s) and is already instantiated",
			uint64(gh), len(g.allocs))
	}
	e := &graphExec{h: driver.GraphExec(d.handle()), g: g, ops: g.ops, autoFree: autoFree}
	g.execs++
	d.execs[e.h] = e
	return e.h, nil
}

// GraphLaunch queues the whole graph as one entry on s. On a capturing
// stream it is refused and invalidates the capture, as cudaGraphLaunch does
// in every capture mode (cmd/cudatruth, CUDA 13.0): a launch is never
// recorded as a child graph.
func (d *Driver) GraphLaunch(eh driver.GraphExec, h driver.Stream) error {
	const what = "graph launch"
	s, err := d.openStream(h, what)
	if err != nil {
		return err
	}
	s.mu.Lock()
	d.mu.Lock()
	e := d.execs[eh]
	counted := false
	switch {
	case e == nil:
		err = errf(driver.ErrInvalidValue, "%s: unknown graph exec %#x", what, uint64(eh))
	case s.cap != nil:
		err = errf(driver.ErrCaptureIllegalOp, "%s into capturing stream %#x: a graph launch is not captured", what, uint64(h))
	case !s.destroyed:
		err = d.materializeLocked(e, what)
		if counted = err == nil && len(e.g.allocs) > 0; counted {
			e.g.pending++
		}
	}
	d.mu.Unlock()
	if err != nil {
		if c := s.cap; c != nil {
			err = d.captureFailed(c, err)
		}
		s.mu.Unlock()
		return err
	}
	o := op{kind: opGraph, sub: e.ops, exec: e, counted: counted}
	full, err := d.submitLocked(s, &o, what)
	s.mu.Unlock()
	if full {
		d.drain(s)
	}
	return err
}

// GraphExecDestroy forgets an instantiation. A launch already queued still
// runs, as in CUDA.
func (d *Driver) GraphExecDestroy(eh driver.GraphExec) error {
	if d.closed.Load() {
		return errClosed("graph exec destroy")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.execs[eh]
	if e == nil {
		return errf(driver.ErrInvalidValue, "graph exec destroy: unknown graph exec %#x", uint64(eh))
	}
	delete(d.execs, eh)
	e.g.execs--
	d.releaseIfUnusedLocked(e.g)
	return nil
}

// GraphDestroy forgets the graph. Its memory is released once its
// instantiation is destroyed too, except allocations a launch made that
// nobody freed: those belong to the caller until Free or FreeAsync.
func (d *Driver) GraphDestroy(gh driver.GraphHandle) error {
	if d.closed.Load() {
		return errClosed("graph destroy")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.graphs[gh]
	if g == nil {
		return errf(driver.ErrInvalidValue, "graph destroy: unknown graph %#x", uint64(gh))
	}
	delete(d.graphs, gh)
	g.destroyed = true
	d.releaseIfUnusedLocked(g)
	return nil
}
