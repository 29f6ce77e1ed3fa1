package allocview

import (
	"fmt"
	"math"
	"strings"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// maxBoostRounds bounds layoutBlocks' rounds of widening small blocks in
// use; a segment that still has one too narrow after them (or whose
// widened blocks would take half its bar) is drawn strictly to scale.
const maxBoostRounds = 8

// layoutBlocks places seg's blocks in a bar width units long: each
// block's share of the bar is its share of the segment's extent (gaps,
// an expandable range's unmapped stretches, included), except that a
// block in use narrower than minBlockWidth is widened to it, the others
// and the gaps shrinking to make room. It returns each block's [x0, x1),
// and whether it was widened. Blocks are in address order, as Snapshot
// lists them.
func layoutBlocks(seg memmap.Segment, width float64) (xs [][2]float64, widened []bool) {
	e := extent(seg)
	xs = make([][2]float64, len(seg.Blocks))
	widened = make([]bool, len(seg.Blocks))
	if e <= 0 {
		return xs, widened
	}
	scale := float64(width) / float64(e)
	var wideBytes int64
	nWide := 0
	for range maxBoostRounds {
		grew := false
		for i, blk := range seg.Blocks {
			if !widened[i] && !blk.State.Cached() && float64(blk.Size)*scale < minBlockWidth {
				widened[i], grew = true, true
				wideBytes += blk.Size
				nWide++
			}
		}
		if !grew {
			break
		}
		room := width - float64(nWide*minBlockWidth)
		if room < width/2 || e <= wideBytes {
			nWide = -1 // too many to widen: to scale
			break
		}
		scale = room / float64(e-wideBytes)
	}
	if nWide < 0 || !settled(seg, widened, scale) {
		clear(widened)
		scale = float64(width) / float64(e)
	}
	x, at := 0.0, int64(0)
	for i, blk := range seg.Blocks {
		x += float64(blk.Offset-at) * scale // a gap before it
		w := float64(blk.Size) * scale
		if widened[i] {
			w = minBlockWidth
		}
		xs[i] = [2]float64{x, min(x+w, width)}
		x += w
		at = blk.Offset + blk.Size
	}
	return xs, widened
}

// settled reports whether every block in use not widened is at least
// minBlockWidth at scale.
func settled(seg memmap.Segment, widened []bool, scale float64) bool {
	for i, blk := range seg.Blocks {
		if !widened[i] && !blk.State.Cached() && float64(blk.Size)*scale < minBlockWidth {
			return false
		}
	}
	return true
}

// appendBar draws a segment's blocks in its bar, width units long. A
// block a unit wide or more (or widened) is a rectangle of its own, its
// tooltip saying what it is; narrower ones share unit columns, each
// taking the colour of the state with most bytes there, equal neighbours
// merged, so a bar costs at most about 2*width rectangles however many
// blocks its segment has.
func appendBar(b []byte, seg memmap.Segment, y int, width float64, names mapNames) []byte {
	b = fmt.Appendf(b, `<rect class="seg" x="%d" y="%d" width="%.1f" height="%d" fill="none" stroke="#999" stroke-width="0.5"><title>%s</title></rect>`+"\n",
		barX, y, width, barHeight, esc(names.segmentTitle(seg)))
	xs, widened := layoutBlocks(seg, width)
	states := memmap.BlockStates()
	index := map[memmap.BlockState]int{}
	for i, st := range states {
		index[st] = i
	}
	ncols := int(math.Ceil(width))
	type column struct {
		units  []float64 // by state
		blocks int
		bytes  int64
	}
	var cols []column
	for i, blk := range seg.Blocks {
		st, ok := index[blk.State]
		if !ok {
			continue
		}
		x0, x1 := xs[i][0], xs[i][1]
		if widened[i] || x1-x0 >= 1 {
			continue // drawn on its own, below
		}
		if cols == nil {
			cols = make([]column, ncols)
		}
		for c := int(x0); c < ncols && float64(c) < x1; c++ {
			if cols[c].units == nil {
				cols[c].units = make([]float64, len(states))
			}
			cols[c].units[st] += min(x1, float64(c+1)) - max(x0, float64(c))
			if c == int(x0) {
				cols[c].blocks++
				cols[c].bytes += blk.Size
			}
		}
	}
	dominant := func(c int) int {
		best := -1
		for i, v := range cols[c].units {
			if v > 0 && (best < 0 || v > cols[c].units[best]) {
				best = i
			}
		}
		return best
	}
	for c := 0; c < len(cols); {
		st := dominant(c)
		end, n, bytes := c+1, cols[c].blocks, cols[c].bytes
		for end < len(cols) && dominant(end) == st {
			n, bytes = n+cols[end].blocks, bytes+cols[end].bytes
			end++
		}
		if st >= 0 {
			b = fmt.Appendf(b, `<rect class="few" x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				barX+c, y, end-c, barHeight, stateColors[states[st]],
				esc(fmt.Sprintf("%s narrower than a pixel, %s in all, mostly %s", plural(n, "block"), bytesText(bytes), states[st])))
		}
		c = end
	}
	prevWide := false
	for i, blk := range seg.Blocks {
		x0, x1 := xs[i][0], xs[i][1]
		own := widened[i] || x1-x0 >= 1
		if _, ok := index[blk.State]; ok && own {
			b = fmt.Appendf(b, `<rect class="blk" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				barX+x0, y, x1-x0, barHeight, stateColors[blk.State], escLines(names.blockTitle(seg, blk)))
		}
		// A border between blocks wide enough to tell apart, so neighbours
		// in one state still read as separate buffers.
		wide := x1-x0 >= 2
		if i > 0 && wide && prevWide && xs[i-1][1] == x0 {
			b = fmt.Appendf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="white" stroke-width="1"/>`+"\n", barX+x0, y, barX+x0, y+barHeight)
		}
		prevWide = wide
	}
	return b
}

// blockTitle is a block's tooltip, one fact a line: its state, size,
// place, pool, owner and, when the profile sampled it, where it was
// allocated.
func (n mapNames) blockTitle(seg memmap.Segment, blk memmap.Block) []string {
	lines := []string{fmt.Sprintf("%s: %s", blk.State, bytesText(blk.Size))}
	if blk.Requested > 0 && blk.Requested != blk.Size {
		lines[0] += fmt.Sprintf(" (%s requested)", bytesText(blk.Requested))
	}
	lines = append(lines, fmt.Sprintf("offset %#x in the %s segment @%#x", blk.Offset, seg.Kind, uint64(seg.Ptr)))
	if blk.Workspace != "" {
		lines = append(lines, "workspace "+blk.Workspace)
	}
	if blk.Pool != 0 {
		lines = append(lines, "in graph pool "+n.pool(blk.Pool))
	}
	if blk.State == memmap.BlockGraphOwned {
		owner := blk.Graph
		if owner == 0 {
			owner = seg.Graph
		}
		lines = append(lines, "owned by "+n.graph(owner))
	}
	if len(blk.Graphs) > 0 {
		names := make([]string, len(blk.Graphs))
		for i, g := range blk.Graphs {
			names[i] = n.graph(g)
		}
		verb := "used by the recorded work of "
		if blk.State == memmap.BlockHeldForGraph {
			verb = "held for "
		}
		lines = append(lines, verb+strings.Join(names, ", "))
	}
	switch {
	case blk.CallSite != "":
		lines = append(lines, "allocated at "+blk.CallSite)
	case !blk.State.Cached() && blk.State != memmap.BlockGraphPool:
		lines = append(lines, "call site not sampled (alloc.SetProfileRate)")
	}
	return append(lines, blk.State.Meaning())
}
