package allocview

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// counter is one row of an allocator's counters table.
type counter struct {
	Name, Value string
}

// counters lists an allocator's alloc.Stats, and what its snapshot adds,
// for people.
func counters(snap memmap.Snapshot) []counter {
	s := alloc.Stats(snap.Stats)
	n := formatCount
	return []counter{
		{"in use", bytesText(s.BytesInUse) + " in " + buffers(s.LiveBuffers)},
		{"reserved from the driver", bytesText(s.BytesReserved)},
		{"memory limit (reserved at most)", limitText(s.MemoryLimit)},
		{"cached (reserved, not in use)", bytesText(s.BytesCached)},
		{"peak in use / reserved", bytesText(s.PeakInUse) + " / " + bytesText(s.PeakReserved)},
		{"allocs / frees", n(s.Allocs) + " / " + n(s.Frees)},
		{"pool hits / misses", n(s.PoolHits) + " / " + n(s.PoolMisses)},
		{"driver allocs / frees", n(s.DriverAllocs) + " / " + n(s.DriverFrees)},
		{"allocations in captures", n(s.CaptureAllocs)},
		{"captures ended / failed", n(s.Captures) + " / " + n(s.FailedCapture)},
		{"live graphs", formatCount(uint64(s.LiveGraphs))},
		{"pinned host", bytesText(s.HostBytes) + " in " + buffers(s.HostBuffers)},
		{"pinned host cached / pins made", bytesText(s.HostCached) + " / " + n(s.HostPins)},
		{"watchdog expiries", n(s.Timeouts)},
		{"out-of-memory errors / reclaim retries", n(s.OutOfMemory) + " / " + n(s.ReclaimRetries)},
		{"held by graphs (owned, pools, held)", bytesText(snap.GraphBytes())},
		{"fragmentation outside graphs (reserved / in use)", fmt.Sprintf("%.2f", snap.Fragmentation())},
	}
}

// limitText is a memory limit for people: "none" when there is none.
func limitText(n int64) string {
	if n == 0 {
		return "none"
	}
	return bytesText(n)
}

func buffers(n int) string {
	if n == 1 {
		return "1 buffer"
	}
	return formatCount(uint64(n)) + " buffers"
}

// formatCount writes v with thousands separators: 1,234,567.
func formatCount(v uint64) string {
	d := strconv.FormatUint(v, 10)
	out := make([]byte, 0, len(d)+len(d)/3)
	for i := range len(d) {
		if i > 0 && (len(d)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, d[i])
	}
	return string(out)
}

// indexAllocator is one allocator's section of the index: its name as
// shown (printable) and as the links' query carries it (Key).
type indexAllocator struct {
	Name, Key, Backend, Device, Safety string
	Counters                           []counter
	States                             []indexState
	// Pools and Graphs are the tables' rows, largest first; MorePools and
	// MoreGraphs the rest, folded (nil when none is).
	Pools      []indexPool
	MorePools  *foldedRows[indexPool]
	Graphs     []indexGraph
	MoreGraphs *foldedRows[indexGraph]
}

// foldedRows are the rows of a table the index folds into a <details>:
// its summary says how many and how much memory they hold together.
type foldedRows[T any] struct {
	Summary  string
	Rows     []T
	Unlisted int // rows not listed (maxIndexGraphs)
}

// indexPool and indexGraph are a row of the index's graph pools and
// graphs tables.
type indexPool struct {
	Name, Bytes, Free, State string
	Borrowed, Graphs         int
}

type indexGraph struct {
	Name, Pool, Owns, Holds, Uses, State string
	OwnsN, HoldsN, UsesN                 string // the blocks, in the cells' tooltips
	Launches                             uint64
}

// indexShown is how many graphs, and graph pools, the index's tables
// show, largest first; the rest fold into a <details> (no script). An
// engine captures a graph per batch size or sequence bucket, 30 to 100 of
// them, most holding little: listed whole they push the segment map and
// the other allocators' sections screens down. Six rows, under the 17
// counters, leave the first segment map starting within the first 800 px
// at 1400 and 800 px wide, with room for a line that wraps (the browser
// test checks it: 722 and 737 px over its workload; eight rows would
// leave it at about 775 and 790), and hold what matters in a bucketed
// engine: the prefill graphs and the largest batches.
const indexShown = 6

// maxIndexGraphs bounds the graphs the index lists one a row, shown and
// folded together.
const maxIndexGraphs = 512

// shownRows is how many of n rows a table shows: all of them when folding
// would hide one row only (the summary line would take its place).
func shownRows(n int) int {
	if n <= indexShown+1 {
		return n
	}
	return indexShown
}

// graphTables are the index's rows for s's graph pools and graphs,
// largest first, the shown ones and the folded rest.
func graphTables(s memmap.Snapshot) (pools []indexPool, morePools *foldedRows[indexPool], graphs []indexGraph, moreGraphs *foldedRows[indexGraph]) {
	names := map[int]string{}
	ps := s.PoolsByBytes()
	var poolRows []indexPool
	for _, p := range ps {
		names[p.ID] = printable(p.Label())
		ip := indexPool{Name: printable(p.Label()), Bytes: bytesText(p.Bytes), Free: bytesText(p.FreeBytes), Borrowed: p.Borrowed, Graphs: len(p.Graphs), State: "open"}
		if p.Closed {
			ip.State = "closed: its memory goes back with its last graph"
		}
		poolRows = append(poolRows, ip)
	}
	pools, morePools = fold(poolRows, len(ps), "graph pools", func(shown int) (rest int64) {
		for _, p := range ps[shown:] {
			rest += p.Bytes
		}
		return rest
	})
	gs := s.GraphsByMemory()
	var graphRows []indexGraph
	for _, g := range gs[:min(len(gs), maxIndexGraphs)] {
		ig := indexGraph{Name: printable(g.Label()), Pool: "-", Launches: g.Launches, State: g.Kind(),
			Owns: bytesText(g.OwnedBytes), Holds: bytesText(g.HeldBytes), Uses: bytesText(g.UsedBytes),
			OwnsN: plural(g.OwnedBlocks, "block"), HoldsN: plural(g.HeldBlocks, "block"), UsesN: plural(g.UsedBlocks, "block")}
		if g.Pool != 0 {
			ig.Pool = names[g.Pool]
		}
		graphRows = append(graphRows, ig)
	}
	graphs, moreGraphs = fold(graphRows, len(gs), "graphs", func(shown int) int64 { return s.GraphsMemory(gs[shown:]) })
	if moreGraphs != nil {
		moreGraphs.Unlisted = len(gs) - len(graphRows)
	}
	return pools, morePools, graphs, moreGraphs
}

// fold splits a table's rows (of total, largest first; past
// maxIndexGraphs unlisted) into the shown ones and the folded rest, whose
// summary counts them and gives restBytes(shown), the memory they hold;
// nil when nothing folds.
func fold[T any](rows []T, total int, what string, restBytes func(shown int) int64) ([]T, *foldedRows[T]) {
	shown := shownRows(total)
	if shown == total {
		return rows, nil
	}
	return rows[:shown], &foldedRows[T]{Summary: fmt.Sprintf("%s more %s, %s", formatCount(uint64(total-shown)), what, bytesText(restBytes(shown))), Rows: rows[shown:]}
}

type indexState struct {
	Name, Color, Bytes string
}

var indexPage = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>capalloc device memory</title>
<style>
body { font-family: sans-serif; margin: 16px 24px; color: #222; }
table { border-collapse: collapse; margin: 6px 0 10px; }
td { padding: 1px 14px 1px 0; font-size: 14px; }
td.v { font-variant-numeric: tabular-nums; }
h2 { margin: 18px 0 2px; font-size: 18px; }
.sub { color: #555; font-size: 13px; }
.note { background: #fff6db; padding: 6px 10px; font-size: 13px; display: inline-block; }
img.map { display: block; width: 100%; max-width: 1000px; height: auto; }
table.list { font-size: 13px; }
table.list th { text-align: left; padding: 2px 14px 2px 0; font-weight: 600; border-bottom: 1px solid #ccc; }
table.list td { white-space: nowrap; font-size: 13px; }
table.list td.n { text-align: right; font-variant-numeric: tabular-nums; }
h3 { margin: 10px 0 2px; font-size: 15px; }
details { margin: -4px 0 10px; font-size: 13px; }
details summary { color: #555; }
</style></head><body>
<h1 style="font-size:20px">capalloc device memory</h1>
<p class="sub">{{len .Allocators}} open allocator(s) ·
<a href="segments.svg">segment map</a> · <a href="snapshot.json">snapshot.json</a> · <a href="summary.txt">summary.txt</a> · <a href="timeline">allocation timeline</a> · <a href="profile">profile</a> (<code>go tool pprof -http=: {{.ProfileURL}}</code>)</p>
{{if eq .Rate 0}}<p class="note">Profile recording is off: call <code>alloc.SetProfileRate(512 &lt;&lt; 10)</code> (or 1 for every allocation) to record allocation sites.</p>
{{else}}<p class="sub">Profile recording on: {{.RateText}}.</p>{{end}}
{{range .Allocators}}
<h2>{{.Name}}</h2>
<div class="sub">{{.Backend}} · {{.Device}} · capture safety {{.Safety}} · <a href="segments.svg?allocator={{.Key}}">segments.svg</a> · <a href="snapshot.json?allocator={{.Key}}">snapshot.json</a> · <a href="profile?allocator={{.Key}}">profile</a></div>
<table>{{range .Counters}}<tr><td>{{.Name}}</td><td class="v">{{.Value}}</td></tr>{{end}}</table>
{{if .Pools}}<h3>graph pools</h3>
<table class="list">{{template "poolHead"}}{{range .Pools}}{{template "poolRow" .}}{{end}}</table>
{{with .MorePools}}<details><summary>{{.Summary}}</summary>
<table class="list">{{template "poolHead"}}{{range .Rows}}{{template "poolRow" .}}{{end}}</table></details>{{end}}{{end}}
{{if .Graphs}}<h3>graphs</h3>
<table class="list">{{template "graphHead"}}{{range .Graphs}}{{template "graphRow" .}}{{end}}</table>
{{with .MoreGraphs}}<details><summary>{{.Summary}}</summary>
<table class="list">{{template "graphHead"}}{{range .Rows}}{{template "graphRow" .}}{{end}}{{if .Unlisted}}<tr><td colspan="7">… {{.Unlisted}} more (snapshot.json lists them all)</td></tr>{{end}}</table></details>{{end}}{{end}}
<img src="segments.svg?allocator={{.Key}}&amp;tables=off" class="map" alt="segment map of {{.Name}}">
{{else}}<p>No open allocator.</p>{{end}}
</body></html>
{{define "poolHead"}}<tr><th>pool</th><th>bytes</th><th>free</th><th>borrowed blocks</th><th>graphs</th><th></th></tr>
{{end}}{{define "poolRow"}}<tr><td>{{.Name}}</td><td class="n">{{.Bytes}}</td><td class="n">{{.Free}}</td><td class="n">{{.Borrowed}}</td><td class="n">{{.Graphs}}</td><td>{{.State}}</td></tr>
{{end}}{{define "graphHead"}}<tr><th>graph</th><th>pool</th><th>owns</th><th>holds</th><th>uses</th><th>launches</th><th></th></tr>
{{end}}{{define "graphRow"}}<tr><td>{{.Name}}</td><td>{{.Pool}}</td><td class="n" title="{{.OwnsN}}">{{.Owns}}</td><td class="n" title="{{.HoldsN}}">{{.Holds}}</td><td class="n" title="{{.UsesN}}">{{.Uses}}</td><td class="n">{{.Launches}}</td><td>{{.State}}</td></tr>
{{end}}`))

func serveIndex(w http.ResponseWriter, r *http.Request, one *alloc.Allocator) {
	page := struct {
		Allocators []indexAllocator
		Rate       int
		RateText   string
		ProfileURL string
	}{Rate: registry.ProfileRate()}
	switch page.Rate {
	case 0:
	case 1:
		page.RateText = "every allocation"
	default:
		page.RateText = "one sample per " + bytesText(int64(page.Rate)) + " allocated, on average"
	}
	page.ProfileURL = profileURL(r)
	for _, s := range snapshots(chosen(one)) {
		ia := indexAllocator{Name: printable(s.Allocator), Key: s.Allocator, Backend: printable(s.Backend), Device: printable(s.Device), Safety: printable(s.CaptureSafety),
			Counters: counters(s)}
		ia.Pools, ia.MorePools, ia.Graphs, ia.MoreGraphs = graphTables(s)
		page.Allocators = append(page.Allocators, ia)
	}
	var buf bytes.Buffer
	if err := indexPage.Execute(&buf, page); err != nil {
		http.Error(w, "allocview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}
