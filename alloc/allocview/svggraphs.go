package allocview

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// The segment map's names for graphs and pools, and its tables of them:
// a row per graph pool and per graph, in columns.

// mapNames names a snapshot's graphs and pools by their IDs.
type mapNames struct {
	graphs map[int]memmap.GraphInfo
	pools  map[int]memmap.PoolInfo
}

func newMapNames(s memmap.Snapshot) mapNames {
	n := mapNames{graphs: make(map[int]memmap.GraphInfo, len(s.Graphs)), pools: make(map[int]memmap.PoolInfo, len(s.Pools))}
	for _, g := range s.Graphs {
		n.graphs[g.ID] = g
	}
	for _, p := range s.Pools {
		n.pools[p.ID] = p
	}
	return n
}

// graph names graph id: "batch-8 (graph 12)", "graph 13 (recording)".
func (n mapNames) graph(id int) string {
	g, ok := n.graphs[id]
	if !ok {
		return fmt.Sprintf("graph %d", id)
	}
	if g.Capturing {
		return g.Label() + " (the capture recording now)"
	}
	return g.Label()
}

// pool names pool id: "decode (pool 3)".
func (n mapNames) pool(id int) string {
	if p, ok := n.pools[id]; ok {
		return p.Label()
	}
	return fmt.Sprintf("pool %d", id)
}

// poolsIn names the pools whose blocks lie in seg, "" for none.
func (n mapNames) poolsIn(seg memmap.Segment) string {
	var ids []int
	for _, blk := range seg.Blocks {
		if blk.Pool != 0 && !slices.Contains(ids, blk.Pool) {
			ids = append(ids, blk.Pool)
		}
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = n.pool(id)
	}
	return strings.Join(names, ", ")
}

// The tables' columns: x of each, text anchored at its start for names,
// at its end for figures; maxName and maxPool are the characters the name
// columns show (the whole name in the cell's tooltip).
const (
	colName     = 20
	colPool     = 250
	colOwns     = 530
	colHolds    = 610
	colUses     = 690
	colLaunches = 786
	maxName     = 34
	maxPool     = 26
	maxTableRow = 512 // graphs drawn one a row at most; the rest counted
)

// appendGraphTables draws s's graph pools and graphs, a row each, largest
// first (as the index lists them), from y down, and returns the y after
// them.
func appendGraphTables(b []byte, s memmap.Snapshot, y int) ([]byte, int) {
	names := newMapNames(s)
	head := func(b []byte, y int, cols ...string) []byte {
		xs := []int{colName, colPool, colOwns, colHolds, colUses, colLaunches}
		for i, c := range cols {
			anchor := "start"
			if i >= 2 {
				anchor = "end"
			}
			weight := ""
			if i == 0 {
				weight = ` font-weight="bold"`
			}
			b = fmt.Appendf(b, `<text x="%d" y="%d" font-size="12" text-anchor="%s" fill="#333"%s>%s</text>`, xs[i], y+12, anchor, weight, esc(c))
		}
		return append(b, '\n')
	}
	cell := func(b []byte, x, y int, anchor, text string) []byte {
		title, limit := "", maxName
		if x == colPool {
			limit = maxPool
		}
		if r := []rune(text); len(r) > limit {
			title, text = text, string(r[:limit-1])+"…"
		}
		b = fmt.Appendf(b, `<text x="%d" y="%d" font-size="12" text-anchor="%s">%s`, x, y+12, anchor, esc(text))
		if title != "" {
			b = fmt.Appendf(b, `<title>%s</title>`, esc(title))
		}
		return append(b, "</text>"...)
	}
	if len(s.Pools) > 0 {
		y += 6
		b = head(b, y, "graph pools", "state", "bytes", "free", "borrowed", "graphs")
		y += rowHeight
		for _, p := range s.PoolsByBytes() {
			state := "open"
			if p.Closed {
				state = "closed, kept for its graphs"
			}
			b = cell(b, colName, y, "start", p.Label())
			b = cell(b, colPool, y, "start", state)
			b = cell(b, colOwns, y, "end", bytesText(p.Bytes))
			b = cell(b, colHolds, y, "end", bytesText(p.FreeBytes))
			b = cell(b, colUses, y, "end", plural(p.Borrowed, "block"))
			b = cell(b, colLaunches, y, "end", fmt.Sprint(len(p.Graphs)))
			b = append(b, '\n')
			y += rowHeight
		}
	}
	if len(s.Graphs) > 0 {
		y += 6
		b = head(b, y, "graphs", "pool", "owns", "holds", "uses", "launches")
		y += rowHeight
		for i, g := range s.GraphsByMemory() {
			if i == maxTableRow {
				b = fmt.Appendf(b, `<text x="%d" y="%d" font-size="12">… %d more graphs (snapshot.json lists them all)</text>`+"\n", colName, y+12, len(s.Graphs)-i)
				y += rowHeight
				break
			}
			name := g.Label()
			if k := g.Kind(); k != "" {
				name += " (" + k + ")"
			}
			pool := "-"
			if g.Pool != 0 {
				pool = names.pool(g.Pool)
			}
			b = cell(b, colName, y, "start", name)
			b = cell(b, colPool, y, "start", pool)
			b = cell(b, colOwns, y, "end", bytesText(g.OwnedBytes))
			b = cell(b, colHolds, y, "end", bytesText(g.HeldBytes))
			b = cell(b, colUses, y, "end", bytesText(g.UsedBytes))
			b = cell(b, colLaunches, y, "end", fmt.Sprint(g.Launches))
			b = append(b, '\n')
			y += rowHeight
		}
	}
	return b, y
}
