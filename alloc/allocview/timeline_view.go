package allocview

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// TimelineView chooses what the timeline shows of a history, so that a
// step can be seen under the memory that stays put: a range of events
// zoomed, the buffers of some call sites only, and the baseline (the
// bytes held throughout what is shown: weights, caches) taken out. The
// zero value shows everything. In the live view they are the query's
// from, to, site and baseline=out; cmd/allocview takes them as flags.
type TimelineView struct {
	// From and To bound the events shown by sequence number (Event.Seq),
	// both included; To 0 is the last event. What was allocated before
	// From is drawn as one series.
	From, To uint64
	// Site keeps only the buffers allocated at call sites whose label
	// (the function, then its file and line, as the legend shows it)
	// contains it, any case; bytes reserved are then not drawn (they are
	// every site's).
	Site string
	// NoBaseline takes out of each series drawn the least it holds over
	// the events shown, so the axis spans what changes; bytes reserved are
	// then not drawn (their scale is the whole memory's).
	NoBaseline bool
}

// drawsReserved reports whether the chart draws the bytes reserved.
func (v TimelineView) drawsReserved() bool { return v.Site == "" && !v.NoBaseline }

// errTimelineView is a query the timeline cannot show.
var errTimelineView = errors.New("allocview: bad timeline view")

// maxSiteFilter bounds the site filter's length.
const maxSiteFilter = 256

// parseTimelineView reads a view from the timeline's query.
func parseTimelineView(q url.Values) (TimelineView, error) {
	var v TimelineView
	for _, f := range []struct {
		key string
		to  *uint64
	}{{"from", &v.From}, {"to", &v.To}} {
		if s := q.Get(f.key); s != "" {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return v, fmt.Errorf("%w: %s=%q: want an event number", errTimelineView, f.key, s)
			}
			*f.to = n
		}
	}
	if v.To != 0 && v.To < v.From {
		return v, fmt.Errorf("%w: to=%d is before from=%d", errTimelineView, v.To, v.From)
	}
	v.Site = q.Get("site")
	if len(v.Site) > maxSiteFilter {
		return v, fmt.Errorf("%w: site filter longer than %d bytes", errTimelineView, maxSiteFilter)
	}
	switch b := q.Get("baseline"); b {
	case "", "in":
	case "out":
		v.NoBaseline = true
	default:
		return v, fmt.Errorf("%w: baseline=%q: want out or in", errTimelineView, b)
	}
	return v, nil
}

// query is v as the timeline's query, after allocator (which may be "").
func (v TimelineView) query(allocator string) string {
	q := url.Values{}
	if allocator != "" {
		q.Set("allocator", allocator)
	}
	if v.From != 0 {
		q.Set("from", strconv.FormatUint(v.From, 10))
	}
	if v.To != 0 {
		q.Set("to", strconv.FormatUint(v.To, 10))
	}
	if v.Site != "" {
		q.Set("site", v.Site)
	}
	if v.NoBaseline {
		q.Set("baseline", "out")
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// zoomed reports whether v shows only part of the events or the sites.
func (v TimelineView) zoomed() bool { return v.From != 0 || v.To != 0 || v.Site != "" }

// apply returns what of h the chart draws: with a site filter the
// matching buffers alone, bytes in use recounted from them over every
// event kept (so what the sites held before the range counts), then the
// events in range.
func (v TimelineView) apply(h memmap.History) memmap.History {
	if v.Site != "" {
		h.Events = filterSites(h, strings.ToLower(v.Site))
	}
	if v.From != 0 || v.To != 0 {
		lo, hi := 0, len(h.Events)
		for lo < hi && h.Events[lo].Seq < v.From {
			lo++
		}
		for v.To != 0 && hi > lo && h.Events[hi-1].Seq > v.To {
			hi--
		}
		h.Events = h.Events[lo:hi]
	}
	return h
}

// filterSites is h's events that concern buffers allocated at a site
// whose label contains want (lower case), and its marks (captures, graph
// closes, out-of-memory errors), each with the bytes in use of those
// buffers alone and none reserved.
func filterSites(h memmap.History, want string) []memmap.Event {
	match := map[int]bool{}
	matches := func(stack int) bool {
		m, ok := match[stack]
		if !ok {
			if stack >= 0 && stack < len(h.Stacks) && len(h.Stacks[stack]) > 0 {
				m = strings.Contains(strings.ToLower(frameLabel(h.Stacks[stack][0])), want)
			}
			match[stack] = m
		}
		return m
	}
	live := map[driver.DevicePtr]int64{}
	var inUse int64
	out := make([]memmap.Event, 0, len(h.Events))
	for _, e := range h.Events {
		switch e.Kind {
		case memmap.EventAlloc:
			if !matches(e.Stack) {
				continue
			}
			live[e.Addr] = e.Size
			inUse += e.Size
		case memmap.EventFree:
			n, ok := live[e.Addr]
			if !ok {
				continue
			}
			delete(live, e.Addr)
			inUse -= n
		case memmap.EventSegmentMap, memmap.EventSegmentUnmap:
			continue
		}
		e.InUse, e.Reserved = inUse, 0
		out = append(out, e)
	}
	return out
}

// takeBaseline takes out of each site's series its least value over the
// points drawn, scales the chart to what is left, and returns the sum
// taken out.
func takeBaseline(tl *timeline) int64 {
	var base int64
	for _, s := range tl.sites {
		if len(s.values) == 0 {
			continue
		}
		least := s.values[0]
		for _, x := range s.values {
			least = min(least, x)
		}
		for k := range s.values {
			s.values[k] -= least
		}
		s.peak -= least
		base += least
	}
	tl.maxBytes = 0
	for k := range tl.points {
		var sum int64
		for _, s := range tl.sites {
			sum += s.values[k]
		}
		tl.maxBytes = max(tl.maxBytes, sum)
	}
	return base
}

// WriteHistoryPage writes the histories as one self-contained HTML page
// (inline SVG and CSS, nothing fetched): each one's timeline as v shows
// it and its summary (memmap.History.Summary). It is the timeline view
// of a history read back from a file (cmd/allocview): a history
// Options.HistoryFile wrote at an out-of-memory error, or WriteHistory.
func WriteHistoryPage(w io.Writer, hs []memmap.History, v TimelineView) error {
	ew := &errWriter{w: w}
	writeTimelinePage(ew, hs, timelinePage{view: v, offline: true})
	return ew.err
}

// errWriter keeps a writer's first error and writes nothing after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
