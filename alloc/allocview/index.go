package allocview

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"strconv"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/registry"
)

// counter is one row of an allocator's counters table.
type counter struct {
	Name, Value string
}

// counters lists an allocator's alloc.Stats for people.
func counters(s alloc.Stats) []counter {
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
		{"watchdog expiries", n(s.Timeouts)},
		{"out-of-memory errors / reclaim retries", n(s.OutOfMemory) + " / " + n(s.ReclaimRetries)},
		{"fragmentation (reserved / in use)", fmt.Sprintf("%.2f", s.Fragmentation())},
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
}

type indexState struct {
	Name, Color, Bytes string
}

var indexPage = template.Must(template.New("index").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>capalloc device memory</title>
<style>
body { font-family: sans-serif; margin: 16px 24px; color: #222; }
table { border-collapse: collapse; margin: 6px 0 10px; }
td { padding: 2px 14px 2px 0; font-size: 14px; }
td.v { font-variant-numeric: tabular-nums; }
h2 { margin: 18px 0 2px; font-size: 18px; }
.sub { color: #555; font-size: 13px; }
.note { background: #fff6db; padding: 6px 10px; font-size: 13px; display: inline-block; }
img.map { display: block; width: 100%; max-width: 1000px; height: auto; }
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
<img src="segments.svg?allocator={{.Key}}" class="map" alt="segment map of {{.Name}}">
{{else}}<p>No open allocator.</p>{{end}}
</body></html>
`))

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
			Counters: counters(alloc.Stats(s.Stats))}
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
