package allocview

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// An expandable range is drawn over its span: blocks past the mapped size
// (a hole before them) stay inside the bar, the hole is left empty, and
// the label says how much of the span is mapped.
func TestExpandableSegmentBar(t *testing.T) {
	seg := memmap.Segment{
		Ptr: 1 << 40, Size: 6 << 20, Span: 10 << 20, Kind: "large", Expandable: true,
		Blocks: []memmap.Block{
			{Offset: 0, Size: 2 << 20, State: memmap.BlockLive, Requested: 2 << 20},
			{Offset: 6 << 20, Size: 4 << 20, State: memmap.BlockFree}, // [2, 6) MiB unmapped
		},
	}
	b, _ := appendMap(nil, memmap.Snapshot{Segments: []memmap.Segment{seg}}, 0)
	svg := string(b)
	if !strings.Contains(svg, "large expandable: 6 MiB mapped of 10 MiB") {
		t.Fatalf("label missing:\n%s", svg)
	}
	var covered int
	for _, m := range regexp.MustCompile(`<rect x="(\d+)" y="\d+" width="(\d+)" height="\d+" fill="[^"]+"><title>`).FindAllStringSubmatch(svg, -1) {
		x, _ := strconv.Atoi(m[1])
		w, _ := strconv.Atoi(m[2])
		if x < barX || x+w > barX+barWidth {
			t.Fatalf("rect [%d, %d) outside the bar [%d, %d)", x, x+w, barX, barX+barWidth)
		}
		covered += w
	}
	if want := barWidth * 6 / 10; covered < want-2 || covered > want+2 {
		t.Fatalf("blocks cover %d px of %d; want about %d (the hole empty)", covered, barWidth, want)
	}
}

// Any name, the driver's included, makes a well-formed segment map: bytes
// that are not UTF-8 and runes XML forbids are drawn as U+FFFD, markup
// is escaped (issue 27, item 5).
func TestSegmentMapOfAnyName(t *testing.T) {
	s := memmap.Snapshot{Allocator: "a\x01<b>&\"'\xff", Backend: "cpu\xfe", Device: "dev\x00\uFFFF\t"}
	var buf bytes.Buffer
	writeSVG(&buf, []memmap.Snapshot{s})
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
