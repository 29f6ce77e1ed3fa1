package allocview

import (
	"fmt"
	"html"
	"io"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// stateColors colours memmap.BlockStates, in the same order.
var stateColors = map[memmap.BlockState]string{
	memmap.BlockLive:         "#4e79a7",
	memmap.BlockWorkspace:    "#9467bd",
	memmap.BlockGraphOwned:   "#e15759",
	memmap.BlockHeldForGraph: "#f28e2b",
	memmap.BlockFree:         "#e6e6e6",
	memmap.BlockCached:       "#b5d99c",
}

// The segment map's geometry, in pixels.
const (
	svgWidth   = 1000
	labelWidth = 250             // segment labels left of the bars
	barX       = labelWidth + 10 // bars start here
	barWidth   = svgWidth - barX - 10
	rowHeight  = 18
	barHeight  = 13
	// maxRows bounds the segments drawn per allocator; the rest are
	// counted (snapshot.json lists them all).
	maxRows = 400
)

// writeSVG draws the segment maps of the snapshots, one under the other.
func writeSVG(w io.Writer, snaps []memmap.Snapshot) {
	var body []byte
	y := 0
	if len(snaps) == 0 {
		body = fmt.Appendf(body, `<text x="10" y="24" font-size="14">no open allocator</text>`)
		y = 40
	}
	for _, s := range snaps {
		body, y = appendMap(body, s, y)
	}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", svgWidth, y, svgWidth, y)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, y)
	w.Write(body)
	io.WriteString(w, "</svg>\n")
}

// appendMap draws one allocator's map from y down and returns the y after it.
func appendMap(b []byte, s memmap.Snapshot, y int) ([]byte, int) {
	esc := func(s string) string { return html.EscapeString(printable(s)) }
	y += 22
	b = fmt.Appendf(b, `<text x="10" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", y, esc(s.Allocator))
	b = fmt.Appendf(b, `<text x="%d" y="%d" font-size="12" fill="#444">%s, %s: reserved %s, in use %s; segments %d, live graphs %d</text>`+"\n",
		barX, y, esc(s.Backend), esc(s.Device), bytesText(s.Stats.BytesReserved), bytesText(s.Stats.BytesInUse), len(s.Segments), len(s.Graphs)-capturing(s))
	y += 8
	x := 10
	for _, st := range memmap.BlockStates() { // legend, with each state's bytes
		label := fmt.Sprintf("%s %s", st, bytesText(s.Bytes[st]))
		b = fmt.Appendf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s" stroke="#888" stroke-width="0.5"/><text x="%d" y="%d" font-size="12">%s</text>`+"\n",
			x, y, stateColors[st], x+16, y+10, esc(label))
		x += 16 + 7*len(label) + 18
	}
	y += 20
	for i, seg := range s.Segments {
		if i == maxRows {
			b = fmt.Appendf(b, `<text x="10" y="%d" font-size="12">… %d more segments (snapshot.json lists them all)</text>`+"\n", y+12, len(s.Segments)-maxRows)
			y += rowHeight
			break
		}
		label := fmt.Sprintf("%s %s @%#x", seg.Kind, bytesText(seg.Size), uint64(seg.Ptr))
		if seg.Expandable {
			label = fmt.Sprintf("%s expandable: %s mapped of %s @%#x", seg.Kind, bytesText(seg.Size), bytesText(seg.Span), uint64(seg.Ptr))
		}
		if seg.Kind == "graph" {
			label = fmt.Sprintf("%s (graph %d)", label, seg.Graph)
		}
		b = fmt.Appendf(b, `<text x="10" y="%d" font-size="11" font-family="monospace">%s</text>`+"\n", y+barHeight-2, esc(label))
		b = appendBar(b, seg, y)
		y += rowHeight
	}
	if len(s.Graphs) > 0 {
		y += 6
		b = fmt.Appendf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">graphs</text>`+"\n", y+12)
		y += rowHeight
		for _, g := range s.Graphs {
			name := fmt.Sprintf("graph %d", g.ID)
			if g.Capturing {
				name = "capture recording now"
			}
			text := fmt.Sprintf("%s: owns %s (%s), holds %s (%s freed by the engine), uses %s (%s live)",
				name, bytesText(g.OwnedBytes), blocks(g.OwnedBlocks), bytesText(g.HeldBytes), blocks(g.HeldBlocks), bytesText(g.UsedBytes), blocks(g.UsedBlocks))
			if g.Eager {
				text += " (eager fallback)"
			}
			b = fmt.Appendf(b, `<text x="20" y="%d" font-size="12">%s</text>`+"\n", y+12, esc(text))
			y += rowHeight
		}
	}
	return b, y + 10
}

// capturing is 1 when the snapshot's graphs include the recording capture.
func capturing(s memmap.Snapshot) int {
	if s.Capturing {
		return 1
	}
	return 0
}

// appendBar draws a segment's blocks in its bar. Blocks narrower than a
// pixel share it: each pixel column takes the colour of the state holding
// most of its bytes, and equal neighbours merge into one rectangle, so a
// segment costs at most barWidth rectangles however many blocks it has.
func appendBar(b []byte, seg memmap.Segment, y int) []byte {
	b = fmt.Appendf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999" stroke-width="0.5"/>`+"\n", barX, y, barWidth, barHeight)
	extent := max(seg.Size, seg.Span) // an expandable range's blocks lie across its span
	if extent <= 0 {
		return b
	}
	index := map[memmap.BlockState]int{}
	for i, st := range memmap.BlockStates() {
		index[st] = i
	}
	cols := make([][]float64, barWidth)
	scale := float64(barWidth) / float64(extent)
	for _, blk := range seg.Blocks {
		st, ok := index[blk.State]
		if !ok {
			continue
		}
		x0, x1 := float64(blk.Offset)*scale, float64(blk.Offset+blk.Size)*scale
		for c := int(x0); c < barWidth && float64(c) < x1; c++ {
			lo, hi := max(x0, float64(c)), min(x1, float64(c+1))
			if cols[c] == nil {
				cols[c] = make([]float64, len(memmap.BlockStates()))
			}
			cols[c][st] += hi - lo
		}
	}
	dominant := func(c int) int {
		best := -1
		for i, v := range cols[c] {
			if v > 0 && (best < 0 || v > cols[c][best]) {
				best = i
			}
		}
		return best
	}
	for c := 0; c < barWidth; {
		st := dominant(c)
		end := c + 1
		for end < barWidth && dominant(end) == st {
			end++
		}
		if st >= 0 {
			b = fmt.Appendf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`+"\n",
				barX+c, y, end-c, barHeight, stateColors[memmap.BlockStates()[st]], memmap.BlockStates()[st])
		}
		c = end
	}
	// Borders between blocks wide enough to tell apart (2 px each side),
	// so neighbours in one state still read as separate buffers.
	prevWide := false
	for _, blk := range seg.Blocks {
		wide := float64(blk.Size)*scale >= 2
		if x := float64(blk.Offset) * scale; blk.Offset > 0 && wide && prevWide {
			b = fmt.Appendf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="white" stroke-width="1"/>`+"\n", float64(barX)+x, y, float64(barX)+x, y+barHeight)
		}
		prevWide = wide
	}
	return b
}

func blocks(n int) string {
	if n == 1 {
		return "1 block"
	}
	return fmt.Sprintf("%d blocks", n)
}

// bytesText writes n in binary units: 512 B, 64 KiB, 1.5 MiB.
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	s := fmt.Sprintf("%.1f", v)
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		s = s[:len(s)-2]
	}
	return s + " " + "KMGTP"[i:i+1] + "iB"
}
