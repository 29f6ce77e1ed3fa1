package allocview

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// stateColors colours memmap.BlockStates, in the same order.
var stateColors = map[memmap.BlockState]string{
	memmap.BlockLive:           "#4e79a7",
	memmap.BlockWorkspace:      "#9467bd",
	memmap.BlockGraphOwned:     "#e15759",
	memmap.BlockHeldForGraph:   "#f28e2b",
	memmap.BlockCachedFragment: "#e6e6e6",
	memmap.BlockCachedSegment:  "#b5d99c",
}

// The segment map's geometry, in the units of its viewBox. The SVG is as
// wide as what holds it (width 100%), so 800 units fit an 800 px window
// with no horizontal scroll bar and text stays readable there (11 and 12
// unit text draws at about 10.5 and 11.5 px); the index caps its width.
// Its height follows from its width (height:auto): opened on its own, a
// browser would otherwise make it the window's height and fit the whole
// map into it, a long map's text shrinking to a few pixels.
const (
	svgWidth   = 800
	labelFont  = 11              // segment labels' monospace size: 0.6 of it a character
	labelWidth = 240             // segment labels left of the bars: 36 characters
	barX       = labelWidth + 10 // bars start here
	barWidth   = svgWidth - barX - 10
	rowHeight  = 18
	barHeight  = 13
	// linearRatio is the largest ratio of segment sizes drawn with bar
	// lengths proportional to size; past it lengths go as the square
	// root, so a 2 MiB segment beside a 1 GiB one is still a bar.
	linearRatio = 8
	minBarWidth = 8 // the shortest segment's bar, however small
	// minBlockWidth is the narrowest a block in use is drawn (a 4 KiB
	// buffer in a 1 GiB segment included); cached blocks are drawn to
	// scale.
	minBlockWidth = 3
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
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="100%%" style="height:auto" viewBox="0 0 %d %d" preserveAspectRatio="xMinYMin meet" font-family="sans-serif">`+"\n", svgWidth, y)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, y)
	w.Write(body)
	io.WriteString(w, "</svg>\n")
}

// esc makes s safe text for the SVG: printable, then escaped.
func esc(s string) string { return html.EscapeString(printable(s)) }

// escLines is a tooltip of lines, each escaped, joined by newlines
// (which printable would replace).
func escLines(lines []string) string {
	for i, l := range lines {
		lines[i] = esc(l)
	}
	return strings.Join(lines, "\n")
}

// appendMap draws one allocator's map from y down and returns the y after it.
func appendMap(b []byte, s memmap.Snapshot, y int) ([]byte, int) {
	y += 20
	b = fmt.Appendf(b, `<text x="10" y="%d" font-size="15" font-weight="bold">%s</text>`+"\n", y, esc(s.Allocator))
	y += 18
	var cached int64
	for st, n := range s.Bytes {
		if st.Cached() {
			cached += n
		}
	}
	graphs := len(s.Graphs) - capturing(s)
	b = fmt.Appendf(b, `<text x="10" y="%d" font-size="12" fill="#444">%s</text>`+"\n", y, esc(fmt.Sprintf(
		"%s, %s · reserved %s · in use %s · cached %s · %s · %s",
		s.Backend, s.Device, bytesText(s.Stats.BytesReserved), bytesText(s.Stats.BytesInUse), bytesText(cached),
		plural(len(s.Segments), "segment"), plural(graphs, "live graph"))))
	b, y = appendLegend(b, s, y+8, cached)
	scale := newSegmentScale(s.Segments)
	y += 6
	for _, line := range scale.explain() {
		y += 15
		b = fmt.Appendf(b, `<text x="10" y="%d" font-size="12" fill="#444">%s</text>`+"\n", y, esc(line))
	}
	y += 8
	for i, seg := range s.Segments {
		if i == maxRows {
			b = fmt.Appendf(b, `<text x="10" y="%d" font-size="12">… %d more segments (snapshot.json lists them all)</text>`+"\n", y+12, len(s.Segments)-maxRows)
			y += rowHeight
			break
		}
		b = fmt.Appendf(b, `<text x="10" y="%d" font-size="%d" font-family="monospace">%s<title>%s</title></text>`+"\n",
			y+barHeight-3, labelFont, esc(segmentLabel(seg)), esc(segmentTitle(seg)))
		b = appendBar(b, seg, y, scale.width(seg))
		y += rowHeight
	}
	if len(s.Graphs) > 0 {
		y += 6
		b = fmt.Appendf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">graphs</text>`+"\n", y+12)
		y += rowHeight
		for _, g := range s.Graphs {
			text := fmt.Sprintf("%s: owns %s (%s), holds %s (%s freed by the engine), uses %s (%s live)",
				graphName(g.ID, g.Capturing), bytesText(g.OwnedBytes), plural(g.OwnedBlocks, "block"), bytesText(g.HeldBytes), plural(g.HeldBlocks, "block"), bytesText(g.UsedBytes), plural(g.UsedBlocks, "block"))
			if g.Eager {
				text += " (eager fallback)"
			}
			b = fmt.Appendf(b, `<text x="20" y="%d" font-size="12">%s</text>`+"\n", y+12, esc(text))
			y += rowHeight
		}
	}
	return b, y + 10
}

// appendLegend draws one line per state from y down: its colour, name,
// bytes and what it means (memmap.BlockState.Meaning), then what
// "cached" sums; it returns the y of the last line.
func appendLegend(b []byte, s memmap.Snapshot, y int, cached int64) ([]byte, int) {
	var parts []string
	for _, st := range memmap.BlockStates() {
		y += 16
		b = fmt.Appendf(b, `<rect x="10" y="%d" width="12" height="12" fill="%s" stroke="#888" stroke-width="0.5"/>`+
			`<text x="28" y="%d" font-size="12">%s</text><text x="200" y="%d" font-size="12" text-anchor="end">%s</text>`+
			`<text x="210" y="%d" font-size="12" fill="#333">%s</text>`+"\n",
			y-10, stateColors[st], y, st, y, bytesText(s.Bytes[st]), y, esc(st.Meaning()))
		if st.Cached() {
			parts = append(parts, string(st))
		}
	}
	y += 16
	b = fmt.Appendf(b, `<rect x="10" y="%d" width="6" height="12" fill="%s"/><rect x="16" y="%d" width="6" height="12" fill="%s"/>`+"\n",
		y-10, stateColors[memmap.BlockCachedFragment], y-10, stateColors[memmap.BlockCachedSegment])
	b = fmt.Appendf(b, `<text x="28" y="%d" font-size="12">cached</text><text x="200" y="%d" font-size="12" text-anchor="end">%s</text>`+
		`<text x="210" y="%d" font-size="12" fill="#333">%s</text>`+"\n",
		y, y, bytesText(cached), y, esc(strings.Join(parts, " + ")+": reserved, not in use (Stats.BytesCached)."))
	return b, y
}

// segmentScale maps segments' sizes to bar lengths: proportional while
// the largest is at most linearRatio times the smallest, else as the
// square root of size.
type segmentScale struct {
	smallest, largest int64
	sqrt              bool
}

func newSegmentScale(segs []memmap.Segment) segmentScale {
	var sc segmentScale
	for i, seg := range segs {
		if i == maxRows {
			break
		}
		e := extent(seg)
		if e <= 0 {
			continue
		}
		if sc.largest == 0 || e < sc.smallest {
			sc.smallest = e
		}
		sc.largest = max(sc.largest, e)
	}
	sc.sqrt = sc.largest > linearRatio*sc.smallest
	return sc
}

// width is seg's bar length.
func (sc segmentScale) width(seg memmap.Segment) float64 {
	e := extent(seg)
	if sc.largest <= 0 || e <= 0 {
		return minBarWidth
	}
	f := float64(e) / float64(sc.largest)
	if sc.sqrt {
		f = math.Sqrt(f)
	}
	return max(minBarWidth, barWidth*f)
}

// explain says on the page how bars are drawn, in lines short enough for
// the viewBox.
func (sc segmentScale) explain() []string {
	lines := []string{"Each bar is a segment (one driver allocation), its length proportional to its size."}
	if sc.sqrt {
		lines = []string{"Each bar is a segment (one driver allocation), its length proportional to the square",
			fmt.Sprintf("root of its size: sizes here differ up to %d×, and a 4× larger segment draws 2× longer.", sc.largest/max(sc.smallest, 1))}
	}
	return append(lines, fmt.Sprintf("In a bar, blocks take their share of its bytes; a block in use is at least %d px wide.", minBlockWidth),
		"Hover a block or a label for its details.")
}

// extent is the bytes a segment's bar spans: an expandable range's blocks
// lie across its span.
func extent(seg memmap.Segment) int64 { return max(seg.Size, seg.Span) }

// segmentLabel is the text left of a segment's bar: kind, size, address.
func segmentLabel(seg memmap.Segment) string {
	switch {
	case seg.Expandable:
		return fmt.Sprintf("%s %s/%s @%#x", seg.Kind, bytesText(seg.Size), bytesText(seg.Span), uint64(seg.Ptr))
	case seg.Kind == "graph":
		return fmt.Sprintf("graph %d: %s @%#x", seg.Graph, bytesText(seg.Size), uint64(seg.Ptr))
	}
	return fmt.Sprintf("%s %s @%#x", seg.Kind, bytesText(seg.Size), uint64(seg.Ptr))
}

// segmentTitle is a segment's tooltip.
func segmentTitle(seg memmap.Segment) string {
	t := fmt.Sprintf("%s segment @%#x: %s in %s", seg.Kind, uint64(seg.Ptr), bytesText(seg.Size), plural(len(seg.Blocks), "block"))
	if seg.Expandable {
		t = fmt.Sprintf("%s expandable range @%#x: %s mapped of a %s span (the gaps are unmapped), %s", seg.Kind, uint64(seg.Ptr), bytesText(seg.Size), bytesText(seg.Span), plural(len(seg.Blocks), "block"))
	}
	if seg.Kind == "graph" {
		t += "; allocated in a capture, owned by " + graphName(seg.Graph, seg.Graph == 0)
	}
	return t
}

func graphName(id int, recording bool) string {
	if recording {
		return "the capture recording now"
	}
	return fmt.Sprintf("graph %d", id)
}

// capturing is 1 when the snapshot's graphs include the recording capture.
func capturing(s memmap.Snapshot) int {
	if s.Capturing {
		return 1
	}
	return 0
}

// plural writes n and noun, plural unless n is 1: "1 block", "3 blocks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
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
