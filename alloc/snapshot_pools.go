package alloc

import (
	"cmp"
	"slices"
	"sort"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// The graph pools in a Snapshot: each pool's PoolInfo, and its own blocks
// listed where the blocks it borrowed lie in the allocator's segments,
// each with the pool, its state (graph-owned by the graph holding it,
// held-for-graph, or graph-pool when free for the next capture) and its
// profile sample.

// idOrZero is gp's ID, 0 for no pool.
func (gp *GraphPool) idOrZero() int {
	if gp == nil {
		return 0
	}
	return gp.id
}

// walkPools records a's graph pools, by ID, and indexes their blocks for
// the segments' walk (poolBlocks). Caller holds a.mu; the graphs were
// walked.
func (w *memWalk) walkPools(a *Allocator) {
	gps := sortedPools(a)
	w.lent = make(map[*block]int)
	w.arenas = make([][]*block, len(gps))
	for i, gp := range gps {
		pi := memmap.PoolInfo{ID: gp.id, Name: gp.name, Closed: gp.closed, Borrowed: len(gp.borrowed), Graphs: []int{}}
		for _, b := range gp.borrowed {
			pi.Bytes += b.class
			w.lent[b] = i
		}
		for _, b := range gp.arena.recent[:gp.arena.nRecent] {
			w.free[b] = true
		}
		var blocks []*block
		for s := range gp.arena.segments() {
			for b := range s.blocks() {
				blocks = append(blocks, b)
				if w.poolFree(b) {
					pi.FreeBytes += b.class
					pi.FreeBlocks++
				}
			}
		}
		slices.SortFunc(blocks, func(x, y *block) int { return cmp.Compare(x.ptr, y.ptr) })
		w.arenas[i] = blocks
		for _, g := range w.graphs {
			if g.Pool == gp.id {
				pi.Graphs = append(pi.Graphs, g.ID)
			}
		}
		if !w.list && len(pi.Graphs) == 0 { // the graphs are not listed: count them
			pi.Graphs = poolGraphIDs(a, gp)
		}
		w.pools = append(w.pools, pi)
	}
}

// poolGraphIDs lists the IDs of gp's live graphs and capture, for a walk
// that does not list graphs. Caller holds a.mu.
func poolGraphIDs(a *Allocator, gp *GraphPool) []int {
	ids := []int{}
	if c := a.guard.cap; c != nil && c.pool == gp {
		ids = append(ids, c.id)
	}
	for g := range a.graphs {
		if g.cap != nil && g.cap.pool == gp {
			ids = append(ids, g.id)
		}
	}
	slices.Sort(ids)
	return ids
}

// poolFree reports whether b, a block of a pool's arena, is free for the
// pool's next captures.
func (w *memWalk) poolFree(b *block) bool {
	return b.free || w.free[b] || b.kind != kindShared
}

// poolBlocks lists, in place of lent (a block pools[i] borrowed, in the
// segment at segPtr), the pool's blocks that start in it: a pool's block
// may run on into the next block it borrowed there (extendLocked grows a
// segment of the pool over its neighbour), where it is not listed again.
func (w *memWalk) poolBlocks(i int, lent *block, segPtr driver.DevicePtr) {
	blocks := w.arenas[i]
	end := lent.ptr + driver.DevicePtr(lent.class)
	k := sort.Search(len(blocks), func(k int) bool { return blocks[k].ptr >= lent.ptr })
	for ; k < len(blocks) && blocks[k].ptr < end; k++ {
		b := blocks[k]
		st := stGraphPool
		graph := 0
		switch {
		case w.poolFree(b):
		case b.live():
			st = stGraphOwned
			w.graphInUse += b.size
			if b.cap != nil {
				graph = b.cap.id
			}
		default: // freed, still used by a graph's recorded work
			st = stHeldForGraph
		}
		w.block(b, int64(b.ptr-segPtr), st)
		if w.list {
			blk := &w.blocks[len(w.blocks)-1]
			blk.Pool, blk.Graph = w.pools[i].ID, graph
		}
	}
}

// labels are the profile's graph and pool labels of c's allocations:
// memmap's names, "batch-8 (graph 12)" and "decode (pool 3)".
func (c *capture) labels() (graph, pool string) {
	graph = memmap.GraphInfo{ID: c.id, Name: c.name}.Label()
	if c.pool != nil {
		pool = memmap.PoolInfo{ID: c.pool.id, Name: c.pool.name}.Label()
	}
	return graph, pool
}

// poolSamplesLocked counts, for the profile, each graph pool's memory
// that no live buffer of its graphs holds, exactly (rate 1), at the call
// that made the pool. Caller holds a.mu.
func poolSamplesLocked(a *Allocator) []inUseSample {
	var out []inUseSample
	for _, gp := range sortedPools(a) {
		var held int64
		for _, b := range gp.borrowed {
			held += b.class
		}
		for s := range gp.arena.segments() {
			for b := range s.blocks() {
				if b.live() {
					held -= b.size
				}
			}
		}
		if held > 0 {
			out = append(out, inUseSample{stk: gp.stk, own: ownerGraphPool, size: held, rate: 1,
				pool: memmap.PoolInfo{ID: gp.id, Name: gp.name}.Label()})
		}
	}
	return out
}
