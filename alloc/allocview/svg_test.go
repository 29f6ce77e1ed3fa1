package allocview

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// svgDoc is a segment map as the tests read it: the root's sizing and its
// rectangles and texts (the map draws everything at the top level).
type svgDoc struct {
	Width   string    `xml:"width,attr"`
	ViewBox string    `xml:"viewBox,attr"`
	Rects   []svgRect `xml:"rect"`
	Texts   []svgText `xml:"text"`
}

type svgRect struct {
	Class string  `xml:"class,attr"`
	X     float64 `xml:"x,attr"`
	W     float64 `xml:"width,attr"`
	Fill  string  `xml:"fill,attr"`
	Title string  `xml:"title"`
}

type svgText struct {
	X      float64 `xml:"x,attr"`
	Anchor string  `xml:"text-anchor,attr"`
	Size   float64 `xml:"font-size,attr"`
	Mono   string  `xml:"font-family,attr"`
	Text   string  `xml:",chardata"`
	Title  string  `xml:"title"`
}

func parseMap(t *testing.T, snaps ...memmap.Snapshot) svgDoc {
	t.Helper()
	var buf bytes.Buffer
	writeSVG(&buf, snaps, false)
	var d svgDoc
	if err := xml.Unmarshal(buf.Bytes(), &d); err != nil {
		t.Fatalf("not well-formed XML: %v\n%s", err, buf.String())
	}
	return d
}

// rects are d's rectangles of a class ("seg": a segment's outline,
// "blk": a block of its own, "few": blocks narrower than a pixel).
func (d svgDoc) rects(class string) []svgRect {
	var out []svgRect
	for _, r := range d.Rects {
		if r.Class == class {
			out = append(out, r)
		}
	}
	return out
}

func (d svgDoc) text() string {
	var b strings.Builder
	for _, t := range d.Texts {
		b.WriteString(t.Text + "\n")
	}
	return b.String()
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 0.5 {
		t.Fatalf("%s: %.1f, want %.1f", what, got, want)
	}
}

func seg(ptr, size int64, blocks ...memmap.Block) memmap.Segment {
	return memmap.Segment{Ptr: driver.DevicePtr(ptr), Size: size, Kind: "large", Blocks: blocks}
}

// A segment's bar is as long as its size says: proportional while sizes
// differ up to linearRatio times, as the square root past that; the page
// says which.
func TestSegmentBarLengths(t *testing.T) {
	for _, c := range []struct {
		big   int64
		ratio float64 // the 2 MiB bar's length over the big one's
		scale string
	}{
		{8 << 20, 1.0 / 4, "its length proportional to its size."},
		{32 << 20, 1.0 / 4, "root of its size: sizes here differ up to 16×"},
		{2 << 30, 1.0 / 32, "root of its size: sizes here differ up to 1024×"},
	} {
		d := parseMap(t, memmap.Snapshot{Segments: []memmap.Segment{
			seg(1<<40, c.big, memmap.Block{Size: c.big, State: memmap.BlockLive}),
			seg(2<<40, 2<<20, memmap.Block{Size: 2 << 20, State: memmap.BlockCachedSegment}),
		}})
		bars := d.rects("seg")
		if len(bars) != 2 {
			t.Fatalf("%d bars, want 2", len(bars))
		}
		near(t, "the largest segment's bar", bars[0].W, barWidth)
		near(t, fmt.Sprintf("a 2 MiB bar beside %s", bytesText(c.big)), bars[1].W, float64(barWidth)*c.ratio)
		if !strings.Contains(d.text(), c.scale) {
			t.Fatalf("the page does not say %q:\n%s", c.scale, d.text())
		}
	}
}

// In a bar, blocks take their share of its bytes; an expandable range is
// drawn over its span, its unmapped stretches left empty, and its label
// and tooltip say how much of the span is mapped.
func TestBlockWidthsProportional(t *testing.T) {
	d := parseMap(t, memmap.Snapshot{Segments: []memmap.Segment{seg(1<<40, 4<<20,
		memmap.Block{Size: 1 << 20, State: memmap.BlockLive},
		memmap.Block{Offset: 1 << 20, Size: 3 << 20, State: memmap.BlockCachedFragment},
	)}})
	blks := d.rects("blk")
	if len(blks) != 2 {
		t.Fatalf("%d blocks drawn, want 2", len(blks))
	}
	near(t, "1 MiB of 4", blks[0].W, float64(barWidth)/4)
	near(t, "3 MiB of 4", blks[1].W, float64(barWidth)*3/4)
	near(t, "the second block's start", blks[1].X, float64(barX)+float64(barWidth)/4)

	exp := memmap.Segment{
		Ptr: 1 << 40, Size: 6 << 20, Span: 10 << 20, Kind: "large", Expandable: true,
		Blocks: []memmap.Block{
			{Offset: 0, Size: 2 << 20, State: memmap.BlockLive, Requested: 2 << 20},
			{Offset: 6 << 20, Size: 4 << 20, State: memmap.BlockCachedFragment}, // [2, 6) MiB unmapped
		},
	}
	d = parseMap(t, memmap.Snapshot{Segments: []memmap.Segment{exp}})
	blks = d.rects("blk")
	near(t, "2 MiB of a 10 MiB span", blks[0].W, float64(barWidth)/5)
	near(t, "the block past the hole's start", blks[1].X, float64(barX)+float64(barWidth)*3/5)
	near(t, "4 MiB of a 10 MiB span", blks[1].W, float64(barWidth)*2/5)
	if !strings.Contains(d.text(), "large 6 MiB/10 MiB @0x10000000000") {
		t.Fatalf("label missing:\n%s", d.text())
	}
	if bar := d.rects("seg")[0]; !strings.Contains(bar.Title, "6 MiB mapped of a 10 MiB span") {
		t.Fatalf("segment tooltip %q", bar.Title)
	}
}

// A block in use too small to see (4 KiB in 48 MiB: 0.05 px) is drawn
// minBlockWidth wide, with its tooltip; the others make room. Free
// blocks are not widened, and a segment with more small buffers than its
// bar could show widened is drawn to scale, in a bounded number of
// rectangles.
func TestLiveBlockMinimumWidth(t *testing.T) {
	d := parseMap(t, memmap.Snapshot{Segments: []memmap.Segment{seg(1<<40, 48<<20,
		memmap.Block{Size: 4 << 10, State: memmap.BlockLive, Requested: 4 << 10},
		memmap.Block{Offset: 4 << 10, Size: 4 << 10, State: memmap.BlockCachedFragment},
		memmap.Block{Offset: 8 << 10, Size: 48<<20 - 8<<10, State: memmap.BlockLive},
	)}})
	blks := d.rects("blk")
	if len(blks) != 2 {
		t.Fatalf("%d blocks drawn on their own, want the two live ones: %+v", len(blks), blks)
	}
	near(t, "a 4 KiB live block", blks[0].W, minBlockWidth)
	if !strings.HasPrefix(blks[0].Title, "live: 4 KiB\n") {
		t.Fatalf("the small block's tooltip: %q", blks[0].Title)
	}
	near(t, "the rest of the bar", blks[0].W+blks[1].W, barWidth)
	if few := d.rects("few"); len(few) != 1 || few[0].W != 1 || !strings.Contains(few[0].Title, "1 block narrower than a pixel, 4 KiB") {
		t.Fatalf("the 4 KiB free block: %+v, want one pixel's column", few)
	}

	many := seg(1<<40, 64<<20)
	for i := range int64(16384) {
		many.Blocks = append(many.Blocks, memmap.Block{Offset: i << 12, Size: 1 << 12, State: memmap.BlockLive})
	}
	d = parseMap(t, memmap.Snapshot{Segments: []memmap.Segment{many}})
	if n := len(d.Rects); n > 2*barWidth {
		t.Fatalf("%d rectangles for one segment", n)
	}
	covered := 0.0
	for _, r := range append(d.rects("blk"), d.rects("few")...) {
		covered += r.W
	}
	near(t, "16,384 live blocks of 4 KiB, to scale in pixel columns", covered, barWidth)
}

// A block's tooltip says its size, offset, state, workspace, owning graph
// and, when the profile sampled it, the call site; and what its state
// means.
func TestBlockTooltips(t *testing.T) {
	s := memmap.Snapshot{Capturing: true, Segments: []memmap.Segment{
		seg(1<<40, 2<<20,
			memmap.Block{Size: 1 << 20, State: memmap.BlockWorkspace, Workspace: "attn", Requested: 1000 << 10, CallSite: "main.reserve main.go:40"},
			memmap.Block{Offset: 1 << 20, Size: 256 << 10, State: memmap.BlockHeldForGraph, Graphs: []int{2}},
			memmap.Block{Offset: 1<<20 + 256<<10, Size: 768 << 10, State: memmap.BlockLive, Requested: 768 << 10, Graphs: []int{2, 14}},
		),
		{Ptr: 2 << 40, Size: 3 << 20, Kind: "graph", Graph: 3, Blocks: []memmap.Block{
			{Size: 3 << 20, State: memmap.BlockGraphOwned, Graph: 3, CallSite: "main.stepTemp main.go:80"},
		}},
		seg(3<<40, 2<<20,
			memmap.Block{Size: 1 << 20, State: memmap.BlockGraphOwned, Pool: 5, Graph: 2, Requested: 1 << 20},
			memmap.Block{Offset: 1 << 20, Size: 1 << 20, State: memmap.BlockGraphPool, Pool: 5},
		),
	},
		Graphs: []memmap.GraphInfo{{ID: 2, Name: "batch-8", Pool: 5}, {ID: 3}, {ID: 14, Capturing: true}},
		Pools:  []memmap.PoolInfo{{ID: 5, Name: "decode", Graphs: []int{2}}},
	}
	want := [][]string{
		{"workspace: 1 MiB (1000 KiB requested)", "offset 0x0 in the large segment @0x10000000000", "workspace attn", "allocated at main.reserve main.go:40", memmap.BlockWorkspace.Meaning()},
		{"held-for-graph: 256 KiB", "offset 0x100000 in the large segment", "held for batch-8 (graph 2)", memmap.BlockHeldForGraph.Meaning()},
		{"live: 768 KiB", "offset 0x140000", "used by the recorded work of batch-8 (graph 2), graph 14 (the capture recording now)", "call site not sampled (alloc.SetProfileRate)", memmap.BlockLive.Meaning()},
		{"graph-owned: 3 MiB", "offset 0x0 in the graph segment @0x20000000000", "owned by graph 3", "allocated at main.stepTemp main.go:80", memmap.BlockGraphOwned.Meaning()},
		{"graph-owned: 1 MiB", "in graph pool decode (pool 5)", "owned by batch-8 (graph 2)", "call site not sampled", memmap.BlockGraphOwned.Meaning()},
		{"graph-pool: 1 MiB", "in graph pool decode (pool 5)", memmap.BlockGraphPool.Meaning()},
	}
	blks := parseMap(t, s).rects("blk")
	if len(blks) != len(want) {
		t.Fatalf("%d blocks drawn, want %d", len(blks), len(want))
	}
	for i, r := range blks {
		lines := strings.Split(r.Title, "\n")
		for _, w := range want[i] {
			if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, w) }) {
				t.Errorf("block %d's tooltip has no line %q:\n%s", i, w, r.Title)
			}
		}
	}
}

// The legend gives each state its colour, bytes and meaning, and says
// that "cached" is the two cached states together.
func TestLegendExplainsStates(t *testing.T) {
	s := memmap.Snapshot{Bytes: map[memmap.BlockState]int64{
		memmap.BlockLive: 5 << 20, memmap.BlockCachedFragment: 3 << 20, memmap.BlockCachedSegment: 4 << 20,
	}}
	d := parseMap(t, s)
	var texts []string
	for _, t := range d.Texts {
		texts = append(texts, t.Text)
	}
	for _, st := range memmap.BlockStates() {
		i := slices.Index(texts, string(st))
		if i < 0 || i+2 >= len(texts) {
			t.Fatalf("no legend entry %s in %q", st, texts)
		}
		if texts[i+1] != bytesText(s.Bytes[st]) || texts[i+2] != st.Meaning() {
			t.Errorf("legend entry %s: %q, want its bytes %q and meaning %q", st, texts[i:i+3], bytesText(s.Bytes[st]), st.Meaning())
		}
		if !slices.ContainsFunc(d.Rects, func(r svgRect) bool { return r.Fill == stateColors[st] }) {
			t.Errorf("no swatch of %s's colour", st)
		}
	}
	i := slices.Index(texts, "cached")
	if i < 0 || texts[i+1] != "7 MiB" || !strings.HasPrefix(texts[i+2], "cached-fragment + cached-segment: reserved, not in use") {
		t.Fatalf("no legend line saying what cached sums: %q", texts)
	}
	if !strings.Contains(d.text(), "· cached 7 MiB ·") {
		t.Fatalf("the header's cached is not the sum: %s", d.text())
	}
}

// The map scales to what holds it (width 100%, a viewBox 800 units
// wide), so an 800 px window shows it whole with no horizontal scroll;
// nothing is drawn past the viewBox.
func TestMapFitsItsViewBox(t *testing.T) {
	s := memmap.Snapshot{Allocator: "fit", Backend: "cuda", Device: "NVIDIA H100 80GB HBM3", Capturing: true, Graphs: make([]memmap.GraphInfo, 13), Segments: []memmap.Segment{
		seg(0x7f3a00000000, 1<<30, memmap.Block{Size: 1 << 30, State: memmap.BlockLive}),
		{Ptr: 0x7f3b00000000, Size: 6 << 20, Span: 10 << 20, Kind: "large", Expandable: true},
		{Ptr: 0x7f3c00000000, Size: 3 << 20, Kind: "graph", Graph: 12},
	}}
	d := parseMap(t, s)
	if d.Width != "100%" || !strings.HasPrefix(d.ViewBox, fmt.Sprintf("0 0 %d ", svgWidth)) || svgWidth > 800 {
		t.Fatalf("width %q, viewBox %q: want 100%% of the page over a viewBox at most 800 wide", d.Width, d.ViewBox)
	}
	for _, r := range d.Rects {
		if r.X+r.W > svgWidth+0.05 {
			t.Errorf("%+v ends past the viewBox", r)
		}
	}
	for _, tx := range d.Texts {
		if tx.Mono != "" && float64(utf8.RuneCountInString(tx.Text))*0.6*tx.Size > labelWidth {
			t.Errorf("label %q runs into the bars (monospace: 0.6 of its size a character)", tx.Text)
		}
		// Sans-serif text averages about half its size a character.
		w := float64(utf8.RuneCountInString(tx.Text)) * 0.55 * tx.Size
		switch {
		case tx.Mono == "" && tx.Anchor == "end" && (tx.X > svgWidth-4 || tx.X-w < 0):
			t.Errorf("%q ending at x %.0f, %.0f units, runs out of the viewBox", tx.Text, tx.X, tx.Size)
		case tx.Mono == "" && tx.Anchor != "end" && tx.X+w > svgWidth-4:
			t.Errorf("%q at x %.0f, %.0f units, runs past the viewBox", tx.Text, tx.X, tx.Size)
		}
	}
}

// Any name, the driver's included, makes a well-formed segment map: bytes
// that are not UTF-8 and runes XML forbids are drawn as U+FFFD, markup
// is escaped (issue 27, item 5).
func TestSegmentMapOfAnyName(t *testing.T) {
	s := memmap.Snapshot{Allocator: "a\x01<b>&\"'\xff", Backend: "cpu\xfe", Device: "dev\x00\uFFFF\t"}
	var buf bytes.Buffer
	writeSVG(&buf, []memmap.Snapshot{s}, false)
	d := xml.NewDecoder(&buf)
	var text strings.Builder
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, buf.String())
		}
		if c, ok := tok.(xml.CharData); ok {
			text.Write(c)
		}
	}
	for _, want := range []string{"a\uFFFD<b>&\"'\uFFFD", "cpu\uFFFD", "dev\uFFFD\uFFFD\uFFFD"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("%q not drawn; text: %q", want, text.String())
		}
	}
}

// A graph's segment is labelled with the graph's name and number, cut to
// the label column (the tooltip has it whole); the index's map leaves the
// tables out.
func TestGraphSegmentLabels(t *testing.T) {
	s := memmap.Snapshot{Segments: []memmap.Segment{
		{Ptr: 2 << 40, Size: 3 << 20, Kind: "graph", Graph: 3, Blocks: []memmap.Block{{Size: 3 << 20, State: memmap.BlockGraphOwned, Graph: 3}}},
		{Ptr: 3 << 40, Size: 1 << 20, Kind: "graph", Graph: 4, Blocks: []memmap.Block{{Size: 1 << 20, State: memmap.BlockGraphOwned, Graph: 4}}},
	}, Graphs: []memmap.GraphInfo{{ID: 3, Name: "batch-8"}, {ID: 4, Name: "a-very-long-graph-name-for-prefill-batch-512"}}}
	d := parseMap(t, s)
	text := d.text()
	for _, want := range []string{"batch-8 (graph 3): 3 MiB\n", "a-very-long-graph-name-for-prefill-…", "graphs"} {
		if !strings.Contains(text, want) {
			t.Errorf("map lacks %q:\n%s", want, text)
		}
	}
	var buf bytes.Buffer
	writeSVG(&buf, []memmap.Snapshot{s}, true)
	if strings.Contains(buf.String(), ">graphs</text>") {
		t.Error("the tables drawn with noTables")
	}
}
