package alloc

import "fmt"

// A capture into a graph pool (graphpool.go): how its allocations, frees
// and end go through the pool. A block the pool hands out is kindShared,
// on capture.pooled (not capture.blocks: no driver allocation node is
// behind it, so the graph's instantiation and destruction ignore it).

// allocInLocked is Alloc's allocation in c, a's active capture: from c's
// graph pool when it has one and room, else an allocation node whose
// memory is the graph's own (allocLocked), which the graph's warnings
// report. Caller holds a.mu.
func (c *capture) allocInLocked(a *Allocator, size int64) (Buffer, error) {
	if c.pool != nil {
		if b, ok := c.pool.allocLocked(c, size); ok {
			return b, nil
		}
		c.poolMiss += size
	}
	return c.allocLocked(a, "Alloc", size)
}

// freePooledLocked frees b, a graph pool's block handed out with gen, in
// c, a's active capture: b's memory is the pool's again at once, for the
// rest of the capture (stream-ordered after the work queued so far) and
// for later captures into the pool (whose graphs never run at the same
// time as this one). No driver call: no free node is recorded. Caller
// holds a.mu.
func (c *capture) freePooledLocked(a *Allocator, b *block, gen uint64) error {
	if b.cap != c {
		return wrapf(ErrInvalidBuffer, "buffer %#x belongs to another graph", b.ptr)
	}
	if err := a.claimLocked(b, gen); err != nil {
		return err
	}
	for i, p := range c.pooled {
		if p == b {
			c.pooled = append(c.pooled[:i], c.pooled[i+1:]...)
			break
		}
	}
	a.releases.releaseLocked(b)
	return nil
}

// retirePooledLocked ends the life of the pool blocks c still holds, as
// Graph.Close does to the graph's own. Caller holds a.mu.
func (c *capture) retirePooledLocked(a *Allocator) {
	for _, b := range c.pooled {
		if b.live() {
			a.retireLocked(b)
		}
	}
}

// discardPooledLocked releases the pool blocks c holds (held instead
// while another capture's or graph's work uses them) and ends c's
// membership of its pool. Caller holds a.mu.
func (c *capture) discardPooledLocked(a *Allocator) {
	if c.pool == nil {
		return
	}
	c.retirePooledLocked(a)
	for _, b := range c.pooled {
		a.releases.releaseLocked(b)
	}
	c.pooled = nil
	if !c.leftPool {
		c.leftPool = true
		c.pool.leaveLocked()
	}
}

// poolWarning is the graph's warning when its capture into a pool had to
// allocate memory of its own. Empty when it did not.
func (c *capture) poolWarning() string {
	if c.poolMiss == 0 {
		return ""
	}
	return fmt.Sprintf("%d B of the capture's allocations did not fit in the graph pool or the allocator's cache and are the graph's own memory, not shared; run the step once eagerly before capturing (docs/graph-pools.md)", c.poolMiss)
}

// releaseGraphPoolsLocked gives every pool's memory back for Close, after
// the graphs were closed: pools the engine left open are leaks
// (leaksLocked) but their memory is not. Caller holds a.mu.
func releaseGraphPoolsLocked(a *Allocator) {
	for gp := range a.graphPools {
		gp.disposeLocked()
	}
}
