package allocview

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
	// absent must not be on the page as visible text: what the view
	// leaves out.
	absent []string
	// tooltips is the fewest tooltips (<title> elements outside the
	// document's head) the page must have; none may be empty.
	tooltips int
	// folded must be on the page inside a <details>, as text shown when
	// it is opened (whitespace runs read as one space).
	folded []string
	// first: per CSS selector, what its first element is; it must start
	// on the first screen, within 800 px of the page's top (the browser
	// check's firstScreenPx).
	first map[string]string
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
	// url is where to load it: a view of the test's server (base is the
	// views' mount point there, ending in "/"), or a file the row writes
	// from the workload.
	url func(t *testing.T, base string, w *workload) string
	// shots are its screenshots' file names, at browserWidths; "" for
	// none at that width (the page is checked at both).
	shots [2]string
	want  func(f viewFacts) pageWant
}

// served is the url of a view of the test's server.
func served(view string) func(*testing.T, string, *workload) string {
	return func(_ *testing.T, base string, _ *workload) string { return base + view }
}

var viewPages = []viewPage{
	{name: "index", url: served(""), shots: [2]string{"allocview-index.png", "allocview-index-800.png"}, want: indexWant},
	{name: "map", url: served("segments.svg"), shots: [2]string{"allocview-map-1400.png", "allocview-map-800.png"}, want: mapWant},
	{name: "timeline", url: served("timeline"), shots: [2]string{"allocview-timeline-1400.png", "allocview-timeline-800.png"}, want: timelineWant(timelineOf{})},
	{name: "timeline-step", url: stepURL, shots: [2]string{"allocview-timeline-step-1400.png", ""}, want: timelineWant(timelineOf{allocator: "decoder", view: stepView})},
	{name: "summary", url: served("summary.txt"), shots: [2]string{"allocview-summary-1400.png", "allocview-summary-800.png"}, want: summaryWant},
	{name: "offline", url: offlineURL, shots: [2]string{"allocview-offline-1400.png", ""}, want: timelineWant(timelineOf{allocator: "decoder", offline: true})},
}

// stepEvents is how many events the step view shows from the last
// capture's begin: the prefill graph's capture and about nine serving
// steps after it (each step 8 to 12 events).
const stepEvents = 90

// stepView is the timeline's view of the workload's step, found in the
// decoder's history: from the last capture's begin (the prefill graph's),
// stepEvents events, the baseline out.
func stepView(h memmap.History) TimelineView {
	last := -1
	for i, e := range h.Events {
		if e.Kind == memmap.EventCaptureBegin {
			last = i
		}
	}
	if last < 0 {
		return TimelineView{NoBaseline: true}
	}
	end := min(last+stepEvents, len(h.Events)-1)
	return TimelineView{From: h.Events[last].Seq, To: h.Events[end].Seq, NoBaseline: true}
}

// stepURL is the live timeline at the step view of the decoder.
func stepURL(_ *testing.T, base string, w *workload) string {
	return base + "timeline" + stepView(historyOf(w.decoder, DefaultMaxEvents)).query("decoder")
}

// offlineURL writes the decoder's history as the engine would
// (Allocator.WriteHistory, history.json) and renders it as cmd/allocview
// does (memmap.ReadHistoryFile, WriteHistoryPage, no view flags): the
// page's file:// URL.
func offlineURL(t *testing.T, _ string, w *workload) string {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "history.json"), filepath.Join(dir, "history.html")
	f, err := os.Create(in)
	require.NoError(t, err)
	require.NoError(t, w.decoder.WriteHistory(f))
	require.NoError(t, f.Close())
	hs, err := memmap.ReadHistoryFile(in, memmap.DefaultHistoryLimits)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	// The want is drawn from the views' window of the history: it must be
	// the whole of what the file holds.
	require.Len(t, hs[0].Events, len(historyOf(w.decoder, DefaultMaxEvents).Events), "the file holds events the views' window does not")
	var page bytes.Buffer
	require.NoError(t, WriteHistoryPage(&page, hs, TimelineView{}))
	require.NoError(t, os.WriteFile(out, page.Bytes(), 0o644))
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(out)}).String()
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

// graphRows are the cells of a snapshot's graph pools and graphs tables,
// a row each, largest first as the views list them, as sz writes bytes:
// a pool's name (decode (pool 3)), bytes, free part, borrowed blocks (as
// blocks writes them) and graphs; a graph's name (batch-8 (graph 12)),
// pool, bytes owned, held and used, and launches.
func graphRows(s memmap.Snapshot, sz func(int64) string, blocks func(int) string) (pools, graphs [][]string) {
	names := map[int]string{}
	for _, p := range s.PoolsByBytes() {
		names[p.ID] = p.Label()
		pools = append(pools, []string{p.Label(), sz(p.Bytes), sz(p.FreeBytes), blocks(p.Borrowed), fmt.Sprint(len(p.Graphs))})
	}
	for _, g := range s.GraphsByMemory() {
		pool := "-"
		if g.Pool != 0 {
			pool = names[g.Pool]
		}
		graphs = append(graphs, []string{g.Label(), pool, sz(g.OwnedBytes), sz(g.HeldBytes), sz(g.UsedBytes), fmt.Sprint(g.Launches)})
	}
	return pools, graphs
}

// rowTexts joins each row's cells as the page shows them, a space apart.
func rowTexts(rows ...[][]string) []string {
	var out []string
	for _, rs := range rows {
		for _, r := range rs {
			out = append(out, strings.Join(r, " "))
		}
	}
	return out
}

// indexWant: each allocator's name, its key counters (the memory graphs
// hold, the fragmentation of the rest), its graph pools and graphs a row
// each (name, bytes), the largest shown and the rest folded under a line
// that counts them, its segment map (an image) drawn, the first
// allocator's starting on the first screen.
func indexWant(f viewFacts) pageWant {
	w := pageWant{marks: map[string]int{"img.map": len(f.snaps)}, first: map[string]string{"img.map": "the first allocator's segment map"}}
	for _, s := range f.snaps {
		st := s.Stats
		w.texts = append(w.texts, s.Allocator,
			"in use "+bytesText(st.BytesInUse)+" in "+buffers(st.LiveBuffers),
			"reserved from the driver "+bytesText(st.BytesReserved),
			"cached (reserved, not in use) "+bytesText(st.BytesCached),
			"live graphs "+formatCount(uint64(st.LiveGraphs)),
			"out-of-memory errors / reclaim retries "+formatCount(st.OutOfMemory)+" / "+formatCount(st.ReclaimRetries),
			"held by graphs (owned, pools, held) "+bytesText(s.GraphBytes()),
			fmt.Sprintf("fragmentation outside graphs (reserved / in use) %.2f", s.Fragmentation()))
		pools, graphs := graphRows(s, bytesText, func(n int) string { return fmt.Sprint(n) })
		for i := range pools { // the workload's pool is open
			pools[i] = append(pools[i], "open")
		}
		if len(pools) > 0 {
			w.texts = append(w.texts, "graph pools pool bytes free borrowed blocks graphs")
		}
		if len(graphs) > 0 {
			w.texts = append(w.texts, "graphs graph pool owns holds uses launches")
		}
		np, ng := shownRows(len(pools)), shownRows(len(graphs))
		w.texts = append(w.texts, rowTexts(pools[:np], graphs[:ng])...)
		w.folded = append(w.folded, rowTexts(pools[np:], graphs[ng:])...)
		if ng < len(graphs) {
			w.texts = append(w.texts, fmt.Sprintf("%d more graphs, %s", len(graphs)-ng, bytesText(s.GraphsMemory(s.GraphsByMemory()[ng:]))))
		}
	}
	return w
}

// mapWant: every segment a bar with its blocks, each allocator's key
// figures, the legend (each state with its bytes, and what cached sums),
// a graph's segments labelled with its name, and the graph pools' and
// graphs' tables.
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
		labels := map[int]string{}
		for _, g := range s.Graphs {
			labels[g.ID] = g.Label()
		}
		for _, seg := range s.Segments[:min(len(s.Segments), maxRows)] {
			if seg.Kind == "graph" {
				w.texts = append(w.texts, labels[seg.Graph]+": "+bytesText(seg.Size))
			}
		}
		pools, graphs := graphRows(s, bytesText, func(n int) string { return plural(n, "block") })
		for i := range pools { // the state after the name; the workload's pool is open
			pools[i] = slices.Insert(pools[i], 1, "open")
		}
		w.texts = append(w.texts, rowTexts(pools, graphs)...)
	}
	w.marks = map[string]int{"rect.seg": segs, "rect.blk, rect.few": segs}
	w.tooltips = 3 * segs // each segment's label, its bar and a block at least
	return w
}

// timelineOf is a timeline page: the live one, of every allocator or of
// one, in a view (found in that allocator's history); or the file
// cmd/allocview writes from one allocator's history, in the default view.
type timelineOf struct {
	allocator string
	view      func(memmap.History) TimelineView
	offline   bool
}

// timelineWant: per allocator with its history, the chart (the areas of
// its sites, and the bytes reserved unless the view leaves them out),
// what the view shows, the chart's summary, its legend (every site drawn
// apart, by its function, with its peak in the view) and the history's
// summary; for one without, the note saying how to turn it on. Offline,
// the page says where it was read from.
func timelineWant(of timelineOf) func(f viewFacts) pageWant {
	return func(f viewFacts) pageWant {
		w := pageWant{marks: map[string]int{}}
		if of.offline {
			w.texts = append(w.texts, "Read from a history file (cmd/allocview)", "go run ./cmd/allocview")
			w.absent = append(w.absent, "take the baseline out") // no links: no server to ask
		}
		charts := 0
		for _, h := range f.histories {
			if of.allocator != "" && h.Allocator != of.allocator {
				continue
			}
			w.texts = append(w.texts, h.Allocator)
			if h.Capacity == 0 {
				w.texts = append(w.texts, "History off")
				continue
			}
			charts++
			var v TimelineView
			if of.view != nil {
				v = of.view(h)
			}
			shown := v.apply(h)
			tl := newTimeline(shown, tlColumns)
			if v.NoBaseline {
				base := takeBaseline(tl)
				w.texts = append(w.texts, "the baseline, "+bytesText(base)+" held throughout, taken out (reserved bytes not drawn)")
			}
			if v.From != 0 || v.To != 0 {
				to := "the last"
				if v.To != 0 {
					to = formatCount(v.To)
				}
				w.texts = append(w.texts, fmt.Sprintf("Showing events %s to %s", formatCount(v.From), to))
			}
			w.texts = append(w.texts, historySummary(tl), "a capture recording")
			reserved := "reserved from the driver: segments, behind the buffers"
			if v.drawsReserved() {
				w.texts = append(w.texts, reserved)
			} else {
				w.absent = append(w.absent, reserved)
			}
			if len(tl.ooms) > 0 {
				w.texts = append(w.texts, "OOM: an out-of-memory error")
			}
			for _, s := range tl.sites {
				label := s.label
				if v.zoomed() && strings.HasPrefix(label, "allocated before") {
					label = fmt.Sprintf("allocated before event %s, the first shown", formatCount(shown.Events[0].Seq))
				}
				w.texts = append(w.texts, label+" peak "+bytesText(s.peak))
			}
			w.texts = append(w.texts, strings.Split(strings.TrimSpace(h.Summary()), "\n")...)
			w.marks["svg path"] += len(tl.sites)
			if v.drawsReserved() {
				w.marks["svg path"]++
				w.tooltips++
			}
			w.tooltips += len(tl.sites) + len(tl.captures) + len(tl.ooms)
		}
		w.marks["svg"] = charts
		return w
	}
}

// summaryWant: each allocator's summary, in its key lines: the bytes in
// use and reserved, the memory graphs hold and the fragmentation of the
// rest, its graph pools and graphs a row each (batch-8 (graph 12) and
// its pool, the bytes it owns, holds and uses).
func summaryWant(f viewFacts) pageWant {
	var w pageWant
	for _, s := range f.snaps {
		st := s.Stats
		w.texts = append(w.texts, fmt.Sprintf("allocator %q", s.Allocator),
			"in use (as requested) "+memmap.SizeText(st.BytesInUse),
			"reserved from the driver "+memmap.SizeText(st.BytesReserved),
			"graph-owned", "graph pools",
			"held by graphs "+memmap.SizeText(s.GraphBytes()),
			fmt.Sprintf("fragmentation outside graphs (reserved / in use, the %s graphs hold left out) %.2f", memmap.SizeText(s.GraphBytes()), s.Fragmentation()),
			fmt.Sprintf("live graphs %d", st.LiveGraphs),
			fmt.Sprintf("out-of-memory errors %d", st.OutOfMemory))
		pools, graphs := graphRows(s, memmap.SizeText, func(n int) string { return fmt.Sprint(n) })
		w.texts = append(w.texts, rowTexts(pools, graphs)...)
	}
	return w
}

// The docs show only screenshots the browser test writes, each of them
// is in docs/ and shown by a doc, and docs/ holds no other PNG: a
// picture that no test makes goes stale unseen, and one no doc shows is
// dead weight.
func TestDocsShowOnlyBrowserScreenshots(t *testing.T) {
	made := map[string]bool{}
	for _, p := range viewPages {
		for _, name := range p.shots {
			if name == "" {
				continue
			}
			made[name] = true
			_, err := os.Stat(filepath.Join("..", "..", "docs", name))
			require.NoError(t, err, "the browser test writes docs/%s: regenerate the screenshots (docs/device-memory.md)", name)
		}
	}
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join("..", "..", "README.md"))
	link := regexp.MustCompile(`\(([^()\s]+\.png)\)`)
	shown, linked := 0, map[string]bool{}
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := filepath.Clean(filepath.Join(filepath.Dir(doc), m[1]))
			require.Equal(t, filepath.Join("..", "..", "docs"), filepath.Dir(target), "%s shows %s, outside docs/", doc, m[1])
			require.True(t, made[filepath.Base(target)], "%s shows %s, which the browser test does not make", doc, m[1])
			linked[filepath.Base(target)] = true
			shown++
		}
	}
	require.NotZero(t, shown, "no screenshot found in the docs: the link pattern is wrong")
	for name := range made {
		require.True(t, linked[name], "docs/%s is made by the browser test and shown by no doc: show it or drop its row's screenshot", name)
	}
	pngs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.png"))
	require.NoError(t, err)
	for _, p := range pngs {
		require.True(t, made[filepath.Base(p)], "%s is made by no test: remove it, or make it in the browser test", p)
	}
}
