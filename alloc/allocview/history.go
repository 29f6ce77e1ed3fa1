package allocview

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// The allocation history's views: history.json (memmap.History, as
// alloc.Allocator.WriteHistory writes it) and the timeline page
// (history_page.go). Each reads the allocators' histories whole, so a
// request copies every kept event out under the history's lock: the
// pages are for a person looking, not for polling.

// historyOf reads a's history back from WriteHistory's JSON.
func historyOf(a *alloc.Allocator) (memmap.History, error) {
	var buf bytes.Buffer
	var h memmap.History
	if err := a.WriteHistory(&buf); err != nil {
		return h, err
	}
	err := json.Unmarshal(buf.Bytes(), &h)
	return h, err
}

// serveHistory serves view "history.json" or "timeline" of one allocator
// or of every open one; the timeline as the query's TimelineView says.
func serveHistory(w http.ResponseWriter, r *http.Request, what string, one *alloc.Allocator) {
	view, err := parseTimelineView(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var hs []memmap.History
	for _, a := range chosen(one) {
		h, err := historyOf(a)
		if err != nil {
			http.Error(w, "allocview: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hs = append(hs, h)
	}
	var buf bytes.Buffer
	if what == "history.json" {
		w.Header().Set("Content-Type", "application/json")
		var v any = hs
		if one != nil {
			v = hs[0]
		}
		_ = json.NewEncoder(&buf).Encode(v)
	} else {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		writeTimelinePage(&buf, hs, timelinePage{view: view, single: one != nil})
	}
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
// columns points to draw.
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
	// Replay: per-site bytes after each event. Buffers allocated before
	// the first kept event are "before the history": the first event's
	// bytes in use, less its own change.
	first := h.Events[0]
	before := first.InUse
	switch first.Kind {
	case memmap.EventAlloc:
		before -= first.Size
	case memmap.EventFree:
		before += first.Size
	}
	type liveBuf struct {
		site int
		size int64
	}
	live := map[driver.DevicePtr]liveBuf{}
	var cur []int64 // by site
	after := make([][]int64, n)
	captureStart := -1
	for i, e := range h.Events {
		switch e.Kind {
		case memmap.EventAlloc:
			s := site(e.Stack)
			for len(cur) <= s {
				cur = append(cur, 0)
			}
			cur[s] += e.Size
			live[e.Addr] = liveBuf{s, e.Size}
		case memmap.EventFree:
			if b, ok := live[e.Addr]; ok {
				cur[b.site] -= b.size
				delete(live, e.Addr)
			} else {
				before -= e.Size
			}
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
		after[i] = append(append([]int64(nil), cur...), before)
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
	peaks := make([]int64, len(labels))
	var beforePeak int64
	for _, v := range after {
		for s, b := range v[:len(v)-1] {
			peaks[s] = max(peaks[s], b)
		}
		beforePeak = max(beforePeak, v[len(v)-1])
	}
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(peaks[y], peaks[x]) })
	drawn := order[:min(len(order), maxSites)]
	for k, s := range drawn {
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
	for _, i := range tl.points {
		v := after[i]
		at := func(s int) int64 {
			if s < len(v)-1 {
				return v[s]
			}
			return 0
		}
		for k, s := range drawn {
			tl.sites[k].values = append(tl.sites[k].values, at(s))
		}
		if other != nil {
			var sum int64
			for _, s := range order[maxSites:] {
				sum += at(s)
			}
			other.values = append(other.values, sum)
			other.peak = max(other.peak, sum)
		}
		if early != nil {
			early.values = append(early.values, v[len(v)-1])
		}
		tl.reserved = append(tl.reserved, h.Events[i].Reserved)
		tl.maxBytes = max(tl.maxBytes, h.Events[i].Reserved, h.Events[i].InUse)
	}
	return tl
}
