package alloc

import (
	"fmt"
	"sync/atomic"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Graph is an instantiated capture. It owns the memory allocated during its
// capture (and holds the memory of pre-capture buffers freed during it)
// until Close, so no address baked into it is ever handed to anyone else
// while it can still be launched.
type Graph struct {
	a     *Allocator
	h     driver.GraphHandle
	exec  driver.GraphExec
	cap   *capture
	eager func() error // set when the driver could not capture
	// eagerAllocs: buffers the eager function's last run allocated.
	eagerAllocs []Buffer
	launched    bool
	closed      bool
	warnings    []string
	launches    uint64 // Launch calls that replayed it (or ran it eagerly)
	id          int    // its capture's (nextGraphID)
	name        string // CaptureOptions.Name
}

// graphIDs numbers captures, and the graphs they give, for the whole
// process: a number is never given twice, so "graph 12" in a view, a log
// line or an error is one graph, whichever allocator holds it.
var graphIDs atomic.Int64

// nextGraphID returns a number no capture or graph of the process had.
func nextGraphID() int { return int(graphIDs.Add(1)) }

// ID is the graph's number, given when its capture began and never given
// again in the process: the views and the leak report name it so.
func (g *Graph) ID() int { return g.id }

// Name is the name its capture was given (CaptureOptions.Name), "" for
// none.
func (g *Graph) Name() string { return g.name }

// graphLabel is how messages name a graph: `"batch-8" (graph 12)`, or
// "graph 12" without a name (the views write memmap's, unquoted).
func graphLabel(id int, name string) string {
	if name == "" {
		return fmt.Sprintf("graph %d", id)
	}
	return fmt.Sprintf("%q (graph %d)", name, id)
}

// Warnings lists what the capture did that an engine should fix (a
// workspace first allocated inside it, for instance).
func (g *Graph) Warnings() []string { return append([]string(nil), g.warnings...) }

// CaptureAllocCount is the number of allocations made during the capture
// (Allocator.CaptureAllocCount's figure for this graph).
func (g *Graph) CaptureAllocCount() int {
	if g.cap == nil {
		return 0
	}
	return g.cap.allocs
}

// Eager reports whether the graph is an eager fallback: Launch runs the
// captured function again instead of replaying a driver graph.
func (g *Graph) Eager() bool { return g.eager != nil }

// eagerRun records the buffers an eager-fallback graph's function
// allocates while it runs, so the graph owns them as a captured graph owns
// its allocations: those the function does not free are freed at the next
// Launch (auto-free-on-launch) or at Close.
type eagerRun struct {
	bufs []Buffer
}

// newEagerGraph runs fn once, eagerly, and returns the graph of a that
// runs it again at every Launch.
func newEagerGraph(a *Allocator, name string, fn func() error) (*Graph, error) {
	g := &Graph{a: a, eager: fn, id: nextGraphID(), name: name, warnings: []string{"driver cannot capture; graph runs its function eagerly"}}
	if err := g.runEager(); err != nil {
		g.freeEagerAllocs()
		return nil, err
	}
	a.mu.Lock()
	a.graphs[g] = struct{}{}
	a.mu.Unlock()
	return g, nil
}

// runEager runs the function with the allocator recording what it
// allocates. Eager runs on one allocator are serialized, as launches on
// one stream are.
func (g *Graph) runEager() error {
	a := g.a
	a.eagerMu.Lock()
	defer a.eagerMu.Unlock()
	run := &eagerRun{}
	a.mu.Lock()
	a.eager = run
	a.lane.closeLocked() // what the run allocates is recorded: the locked path's
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.lane.openLocked()
		a.eager = nil
		g.eagerAllocs = append(g.eagerAllocs, run.bufs...)
		a.mu.Unlock()
	}()
	return g.eager()
}

// freeEagerAllocs frees the buffers the last eager runs allocated and did
// not free themselves.
func (g *Graph) freeEagerAllocs() {
	a := g.a
	a.mu.Lock()
	bufs := g.eagerAllocs
	g.eagerAllocs = nil
	a.mu.Unlock()
	for _, b := range bufs {
		a.mu.Lock()
		live := b.blk.validFor(b.gen)
		a.mu.Unlock()
		if live {
			if err := a.Free(b); err != nil {
				a.opts.logger().Warn("capalloc: freeing an eager graph's allocation", "backend", a.backend, "err", err)
			}
		}
	}
}

// Launch replays the graph on the allocator's stream. Inside a capture it
// is refused with ErrCaptureIllegalOp before any driver call: CUDA does not
// record a graph launch into a capture, it invalidates the capture.
func (g *Graph) Launch() error {
	a := g.a
	a.mu.Lock()
	if g.closed {
		a.mu.Unlock()
		return a.fail("Graph.Launch", -1, StateNone, wrapf(ErrClosed, "graph was closed"))
	}
	if g.eager != nil {
		a.mu.Unlock()
		g.freeEagerAllocs() // auto-free-on-launch
		err := g.runEager()
		if err == nil {
			a.mu.Lock()
			g.launches++
			a.mu.Unlock()
		}
		return err
	}
	st, err := a.guard.stateLocked()
	if err == nil {
		switch st {
		case StateNone:
			err = a.drv.GraphLaunch(g.exec, a.stream)
		case StateActive:
			// cudaGraphLaunch into a capturing stream returns 900 and
			// invalidates the capture, in every capture mode (measured with
			// cmd/cudatruth, CUDA 13.0, docs/cuda-truth.md): a graph is not
			// recorded as a child. Refuse first and keep the capture valid.
			err = wrapf(driver.ErrCaptureIllegalOp, "a graph cannot be launched into a capture (CUDA refuses it and invalidates the capture); launch it before or after, or capture its work directly")
		default:
			err = refusal(st, "graph launch")
		}
	}
	if err == nil {
		g.launched = true
		g.launches++
	}
	a.mu.Unlock()
	if err != nil {
		return a.fail("Graph.Launch", -1, st, err)
	}
	return nil
}

// Close destroys the graph and releases what it owned. It is refused while
// the stream is capturing, since the frees it makes would be recorded. Its
// buffers are invalid from the moment it returns; if a blocking call
// (Upload, Download) is still copying one of them, the graph is destroyed,
// and its memory freed, when that call returns.
func (g *Graph) Close() error {
	a := g.a
	a.mu.Lock()
	if g.closed {
		a.mu.Unlock()
		return a.fail("Graph.Close", -1, StateNone, wrapf(ErrClosed, "graph closed twice"))
	}
	st, err := a.guard.stateLocked()
	if err == nil && st != StateNone {
		err = refusal(st, "graph close frees memory; close it after the capture ends")
	}
	if err != nil {
		a.mu.Unlock()
		return a.fail("Graph.Close", -1, st, err)
	}
	g.closeLocked()
	a.mu.Unlock()
	if g.eager != nil {
		g.freeEagerAllocs()
	}
	a.releases.flush()
	return nil
}

// closeLocked closes g: its buffers' handles are invalid from now on,
// and it is destroyed on the driver and its capture released
// (destroyLocked) at once, or, while a blocking call still uses one
// of its buffers (pinLocked), by the last such call when it returns:
// destroying the graph frees its memory. AllocSync blocks wait for
// releases.flush; an eager graph's allocations for freeEagerAllocs. Caller
// holds a.mu.
func (g *Graph) closeLocked() {
	a := g.a
	g.closed = true
	delete(a.graphs, g)
	if h := a.stats.hist; h != nil {
		h.record(evGraphClose, 0, 0, graphTag(g.id), "")
	}
	if g.eager != nil {
		return
	}
	c := g.cap
	for _, b := range c.blocks {
		if b.live() {
			a.retireLocked(b)
		}
	}
	c.retirePooledLocked(a)
	if c.pins > 0 {
		c.closedGraph = g
		return
	}
	g.destroyLocked()
}

// destroyLocked destroys g on the driver and releases its capture. Caller
// holds a.mu.
func (g *Graph) destroyLocked() {
	a := g.a
	if a.guard.strict && a.guard.dom.globalElsewhere(a.stream) {
		// Strict: the exec destroy (and the frees of its materialized
		// allocations), which the documented rules would make in Relaxed
		// interaction mode now, wait for the domain's last capture to end.
		a.guard.dom.afterAll(func() {
			a.mu.Lock()
			g.destroyLocked()
			a.mu.Unlock()
			go a.releases.flush() // takes the gate: not under its shared side
		})
		return
	}
	if err := a.drv.GraphExecDestroy(g.exec); err != nil {
		a.opts.logger().Warn("capalloc: graph exec destroy", "backend", a.backend, "err", err)
	}
	if err := a.drv.GraphDestroy(g.h); err != nil {
		a.opts.logger().Warn("capalloc: graph destroy", "backend", a.backend, "err", err)
	}
	g.cap.discardLocked(g.launched)
}
