package allocview

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// The pages the browser test (browser_test.go, -tags browser) loads, what
// each must show, and the screenshots it writes of them; built without
// the tag too, so that the docs' screenshots are checked against the
// table in every test run.

// pageWant is what a page must show besides having no fault of its own
// (overflow, an empty tooltip, text too small to read, an image not
// shown, a console error, a failed request).
type pageWant struct {
	// marks: per CSS selector, the fewest elements it must select; every
	// one of them must be drawn with a non-zero width.
	marks map[string]int
	// texts must be on the page as visible text (HTML text, and SVG text
	// drawn with a size), whitespace runs read as one space.
	texts []string
	// tooltips is the fewest tooltips (<title> elements outside the
	// document's head) the page must have; none may be empty.
	tooltips int
}

// viewFacts is what the pages should show of the workload: the
// allocators' snapshots and histories, in the views' order.
type viewFacts struct {
	snaps     []memmap.Snapshot
	histories []memmap.History
}

// viewPage is one page the browser test loads. A page added to the views
// (or an offline file written from history.json) is one more row.
type viewPage struct {
	name string
	// url is where to load it; base is the views' mount point on the
	// test's server, ending in "/".
	url func(t *testing.T, base string) string
	// shots are its screenshots' file names, at browserWidths.
	shots [2]string
	want  func(f viewFacts) pageWant
}

// served is the url of a view of the test's server.
func served(view string) func(*testing.T, string) string {
	return func(_ *testing.T, base string) string { return base + view }
}

var viewPages = []viewPage{
	{name: "index", url: served(""), shots: [2]string{"allocview-index.png", "allocview-index-800.png"}, want: indexWant},
	{name: "map", url: served("segments.svg"), shots: [2]string{"allocview-map-1400.png", "allocview-map-800.png"}, want: mapWant},
	{name: "timeline", url: served("timeline"), shots: [2]string{"allocview-timeline-1400.png", "allocview-timeline-800.png"}, want: timelineWant},
	{name: "summary", url: served("summary.txt"), shots: [2]string{"allocview-summary-1400.png", "allocview-summary-800.png"}, want: summaryWant},
}

// cachedBytes is the bytes of a snapshot's cached states.
func cachedBytes(s memmap.Snapshot) int64 {
	var n int64
	for st, b := range s.Bytes {
		if st.Cached() {
			n += b
		}
	}
	return n
}

// indexWant: each allocator's name, its key counters, its segment map
// (an image) drawn.
func indexWant(f viewFacts) pageWant {
	w := pageWant{marks: map[string]int{"img.map": len(f.snaps)}}
	for _, s := range f.snaps {
		st := s.Stats
		w.texts = append(w.texts, s.Allocator,
			"in use "+bytesText(st.BytesInUse)+" in "+buffers(st.LiveBuffers),
			"reserved from the driver "+bytesText(st.BytesReserved),
			"cached (reserved, not in use) "+bytesText(st.BytesCached),
			"live graphs "+formatCount(uint64(st.LiveGraphs)),
			"out-of-memory errors / reclaim retries "+formatCount(st.OutOfMemory)+" / "+formatCount(st.ReclaimRetries))
	}
	return w
}

// mapWant: every segment a bar with its blocks, each allocator's key
// figures and the legend: each state with its bytes, and what cached sums.
func mapWant(f viewFacts) pageWant {
	segs := 0
	w := pageWant{}
	for _, s := range f.snaps {
		segs += min(len(s.Segments), maxRows)
		st := s.Stats
		w.texts = append(w.texts, s.Allocator,
			"reserved "+bytesText(st.BytesReserved), "in use "+bytesText(st.BytesInUse), "cached "+bytesText(cachedBytes(s)),
			plural(len(s.Graphs)-capturing(s), "live graph"))
		for _, state := range memmap.BlockStates() {
			w.texts = append(w.texts, string(state)+" "+bytesText(s.Bytes[state])+" "+state.Meaning())
		}
	}
	w.marks = map[string]int{"rect.seg": segs, "rect.blk, rect.few": segs}
	w.tooltips = 3 * segs // each segment's label, its bar and a block at least
	return w
}

// timelineWant: per allocator with its history, the chart (the areas of
// its sites and the bytes reserved), its summary and its legend (every
// site drawn apart, by its function); for one without, the note saying
// how to turn it on.
func timelineWant(f viewFacts) pageWant {
	w := pageWant{marks: map[string]int{}}
	charts := 0
	for _, h := range f.histories {
		w.texts = append(w.texts, h.Allocator)
		if h.Capacity == 0 {
			w.texts = append(w.texts, "History off")
			continue
		}
		charts++
		tl := newTimeline(h, tlColumns)
		w.texts = append(w.texts, historySummary(tl),
			"reserved from the driver: segments, behind the buffers", "a capture recording")
		if len(tl.ooms) > 0 {
			w.texts = append(w.texts, "OOM: an out-of-memory error")
		}
		for _, s := range tl.sites {
			w.texts = append(w.texts, s.label+" peak "+bytesText(s.peak))
		}
		w.marks["svg path"] += len(tl.sites) + 1
		w.tooltips += len(tl.sites) + 1 + len(tl.captures) + len(tl.ooms)
	}
	w.marks["svg"] = charts
	return w
}

// summaryWant: each allocator's summary, in its key lines.
func summaryWant(f viewFacts) pageWant {
	var w pageWant
	for _, s := range f.snaps {
		st := s.Stats
		w.texts = append(w.texts, fmt.Sprintf("allocator %q", s.Allocator),
			"in use (as requested) "+memmap.SizeText(st.BytesInUse),
			"reserved from the driver "+memmap.SizeText(st.BytesReserved),
			"graph-owned",
			fmt.Sprintf("live graphs %d", st.LiveGraphs),
			fmt.Sprintf("out-of-memory errors %d", st.OutOfMemory))
	}
	return w
}

// The docs show only screenshots the browser test writes, and each of
// them is there: a picture in docs/ or the README that no test makes
// goes stale unseen.
func TestDocsShowOnlyBrowserScreenshots(t *testing.T) {
	made := map[string]bool{}
	for _, p := range viewPages {
		for _, name := range p.shots {
			made[name] = true
			_, err := os.Stat(filepath.Join("..", "..", "docs", name))
			require.NoError(t, err, "the browser test writes docs/%s: regenerate the screenshots (docs/device-memory.md)", name)
		}
	}
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join("..", "..", "README.md"))
	link := regexp.MustCompile(`\(([^()\s]+\.png)\)`)
	shown := 0
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := filepath.Clean(filepath.Join(filepath.Dir(doc), m[1]))
			require.Equal(t, filepath.Join("..", "..", "docs"), filepath.Dir(target), "%s shows %s, outside docs/", doc, m[1])
			require.True(t, made[filepath.Base(target)], "%s shows %s, which the browser test does not make", doc, m[1])
			shown++
		}
	}
	require.NotZero(t, shown, "no screenshot found in the docs: the link pattern is wrong")
}
