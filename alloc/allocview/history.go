package allocview

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// The allocation history's views: history.json (memmap.History, as
// alloc.Allocator.WriteHistory writes it) and the timeline page
// (history_page.go). Each reads the newest max_events events of each
// allocator's history (DefaultMaxEvents unless the request asks, at most
// MaxEvents): the history's lock, which the engine's allocations and
// frees take, is held only to copy that window, one copy at a time in
// the process, and the JSON is encoded once, as it is sent.

// DefaultMaxEvents is how many events, per allocator, history.json and
// the timeline read unless the request's ?max_events= says otherwise.
const DefaultMaxEvents = 10000

// MaxEvents is the most events per allocator a request may ask for: a
// copy of 24 MiB (256 B an event) under the history's lock, and 35-66 MiB
// allocated in all to draw or encode it.
const MaxEvents = 100000

// historyCopy is held across a history's copy and symbolization: one at
// a time in the process, however many clients poll.
var historyCopy sync.Mutex

// historyOf returns a's newest max events (registry.History).
func historyOf(a *alloc.Allocator, max int) memmap.History {
	historyCopy.Lock()
	defer historyCopy.Unlock()
	return registry.History(a, max)
}

// maxEvents reads the request's max_events, or answers 400 and returns
// false.
func maxEvents(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("max_events")
	if v == "" {
		return DefaultMaxEvents, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > MaxEvents {
		http.Error(w, fmt.Sprintf("allocview: max_events=%q: want a count of events from 0 to %d", v, MaxEvents), http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

// serveHistory serves view "history.json" or "timeline" of one allocator
// or of every open one.
func serveHistory(w http.ResponseWriter, r *http.Request, view string, one *alloc.Allocator) {
	max, ok := maxEvents(w, r)
	if !ok {
		return
	}
	if view == "history.json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w) // straight to the client; a failed write is theirs
		if one != nil {
			_ = enc.Encode(historyOf(one, max))
			return
		}
		io.WriteString(w, "[") // one allocator's history in memory at a time
		for i, a := range registry.Allocators() {
			if i > 0 {
				io.WriteString(w, ",")
			}
			_ = enc.Encode(historyOf(a, max))
		}
		io.WriteString(w, "]\n")
		return
	}
	var hs []memmap.History
	for _, a := range chosen(one) {
		hs = append(hs, historyOf(a, max))
	}
	var buf bytes.Buffer
	writeTimelinePage(&buf, hs, one != nil)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// timelineSite is one call site's series: the bytes its live buffers
// hold at each point drawn.
type timelineSite struct {
	label, detail string // the frame as a person reads it; the whole stack
	peak          int64
	color         string
	values        []int64
}

// timeline is a history prepared for drawing: points (events, chosen
// for the peaks when there are more than the chart's columns) with the
// bytes in use by site, the bytes reserved, and the marks.
type timeline struct {
	h        memmap.History
	points   []int // event indexes drawn
	reserved []int64
	sites    []*timelineSite // the largest, then "other sites", then "before the history"
	maxBytes int64
	ooms     []int // event indexes
	captures [][2]int
	closes   []int
}

// maxSites bounds the sites drawn apart; the rest are "other sites".
const maxSites = 8

// siteColors colours the sites, in order of their peaks.
var siteColors = []string{"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#8c8c8c", "#c7c7c7"}

// newTimeline attributes every buffer's bytes to the site that
// allocated it, from its alloc event to its free, and picks at most
// columns points to draw. It replays the events twice with a running
// total per site, not a table of events by sites: once for the sites'
// peaks, which choose the sites drawn apart, then for the values at the
// points drawn. What it holds besides the history is the sites, the live
// buffers and columns × (maxSites+2) values.
func newTimeline(h memmap.History, columns int) *timeline {
	tl := &timeline{h: h}
	n := len(h.Events)
	if n == 0 {
		return tl
	}
	// Sites, by the first frame of the allocation's stack.
	siteOf := map[int]int{} // stack index to site index
	var labels []string
	var details []string
	byLabel := map[string]int{}
	site := func(stack int) int {
		if s, ok := siteOf[stack]; ok {
			return s
		}
		label, detail := "(no stack)", ""
		if stack >= 0 && stack < len(h.Stacks) && len(h.Stacks[stack]) > 0 {
			label, detail = frameLabel(h.Stacks[stack][0]), stackText(h.Stacks[stack])
		}
		s, ok := byLabel[label]
		if !ok {
			s = len(labels)
			byLabel[label] = s
			labels, details = append(labels, label), append(details, detail)
		}
		siteOf[stack] = s
		return s
	}
	// The sites' peaks, and the marks.
	r := newSiteReplay(h, site)
	var peaks []int64 // by site: every site is one an alloc changed
	var beforePeak int64
	captureStart := -1
	for i, e := range h.Events {
		if s, _ := r.apply(e); s >= 0 {
			for len(peaks) <= s {
				peaks = append(peaks, 0)
			}
			peaks[s] = max(peaks[s], r.cur[s])
		}
		beforePeak = max(beforePeak, r.before)
		switch e.Kind {
		case memmap.EventOutOfMemory:
			tl.ooms = append(tl.ooms, i)
		case memmap.EventCaptureBegin:
			captureStart = i
		case memmap.EventCaptureEnd:
			if captureStart >= 0 {
				tl.captures = append(tl.captures, [2]int{captureStart, i})
				captureStart = -1
			}
		case memmap.EventGraphClose:
			tl.closes = append(tl.closes, i)
		}
	}
	if captureStart >= 0 {
		tl.captures = append(tl.captures, [2]int{captureStart, n - 1})
	}
	// Points: every event, or per column the event of most bytes in use.
	if n <= columns {
		for i := range n {
			tl.points = append(tl.points, i)
		}
	} else {
		for c := range columns {
			lo, hi := c*n/columns, (c+1)*n/columns
			best := lo
			for i := lo; i < hi; i++ {
				if h.Events[i].InUse > h.Events[best].InUse {
					best = i
				}
			}
			tl.points = append(tl.points, best)
		}
	}
	// The largest sites by peak apart, the others summed.
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(peaks[y], peaks[x]) })
	drawn := order[:min(len(order), maxSites)]
	drawnAs := make([]int, len(labels)) // site to its index in tl.sites, -1 when summed in "other"
	for s := range drawnAs {
		drawnAs[s] = -1
	}
	for k, s := range drawn {
		drawnAs[s] = k
		tl.sites = append(tl.sites, &timelineSite{label: labels[s], detail: details[s], peak: peaks[s], color: siteColors[k]})
	}
	var other *timelineSite
	if len(order) > maxSites {
		other = &timelineSite{label: fmt.Sprintf("%d other sites", len(order)-maxSites), color: siteColors[maxSites]}
		tl.sites = append(tl.sites, other)
	}
	var early *timelineSite
	if beforePeak > 0 {
		early = &timelineSite{label: "allocated before the oldest event kept", peak: beforePeak, color: siteColors[maxSites+1]}
		tl.sites = append(tl.sites, early)
	}
	// The values at the points, replayed again.
	r = newSiteReplay(h, site)
	r.cur = make([]int64, len(labels))
	var otherSum int64
	next := 0 // into tl.points, which ascend
	for i, e := range h.Events {
		if s, delta := r.apply(e); s >= 0 && drawnAs[s] < 0 {
			otherSum += delta
		}
		if next == len(tl.points) || tl.points[next] != i {
			continue
		}
		next++
		for k, s := range drawn {
			tl.sites[k].values = append(tl.sites[k].values, r.cur[s])
		}
		if other != nil {
			other.values = append(other.values, otherSum)
			other.peak = max(other.peak, otherSum)
		}
		if early != nil {
			early.values = append(early.values, r.before)
		}
		tl.reserved = append(tl.reserved, e.Reserved)
		tl.maxBytes = max(tl.maxBytes, e.Reserved, e.InUse)
	}
	return tl
}

// siteReplay replays a history's events: the bytes each site's live
// buffers hold, and those of the buffers allocated before the first
// event kept (the first event's bytes in use, less its own change; less
// each free of a buffer not seen allocated).
type siteReplay struct {
	site   func(stack int) int
	live   map[driver.DevicePtr]liveBuf
	cur    []int64 // by site
	before int64
}

type liveBuf struct {
	site int
	size int64
}

func newSiteReplay(h memmap.History, site func(int) int) *siteReplay {
	first := h.Events[0]
	r := &siteReplay{site: site, live: map[driver.DevicePtr]liveBuf{}, before: first.InUse}
	switch first.Kind {
	case memmap.EventAlloc:
		r.before -= first.Size
	case memmap.EventFree:
		r.before += first.Size
	}
	return r
}

// apply applies e, and returns the site whose bytes it changed (-1:
// none) and by how much.
func (r *siteReplay) apply(e memmap.Event) (int, int64) {
	switch e.Kind {
	case memmap.EventAlloc:
		s := r.site(e.Stack)
		for len(r.cur) <= s {
			r.cur = append(r.cur, 0)
		}
		r.cur[s] += e.Size
		r.live[e.Addr] = liveBuf{s, e.Size}
		return s, e.Size
	case memmap.EventFree:
		if b, ok := r.live[e.Addr]; ok {
			r.cur[b.site] -= b.size
			delete(r.live, e.Addr)
			return b.site, -b.size
		}
		r.before -= e.Size
	}
	return -1, 0
}
