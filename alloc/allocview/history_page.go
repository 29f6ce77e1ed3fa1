package allocview

import (
	"fmt"
	"html"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// The timeline page: per allocator with its history on, the bytes in use
// over its kept events, stacked by the call site that allocated them,
// over the bytes reserved from the driver, with captures shaded and
// out-of-memory errors marked; a legend names the sites. Self-contained:
// inline SVG and CSS, no script, no font or image fetched.

// The chart's geometry, in the SVG's own units (it scales to the page).
const (
	tlWidth   = 860 // 1.3 page pixels a unit at 1400 px, 0.9 at 800 px: the labels stay readable at both
	tlHeight  = 300
	tlLeft    = 70 // the byte axis' labels left of it
	tlRight   = tlWidth - 14
	tlTop     = 22
	tlBottom  = 262 // the event axis' labels below it
	tlColumns = 600 // points drawn at most: per column, the event of most bytes in use
)

const timelineHead = `<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>capalloc allocation timeline</title>
<style>
body { font-family: sans-serif; margin: 16px 24px; color: #222; max-width: 1200px; }
h1 { font-size: 20px; } h2 { margin: 20px 0 2px; font-size: 18px; }
.sub { color: #555; font-size: 13px; }
.note { background: #fff6db; padding: 6px 10px; font-size: 13px; display: inline-block; }
svg { width: 100%; height: auto; display: block; margin: 6px 0; }
table.legend { border-collapse: collapse; font-size: 13px; }
table.legend td { padding: 2px 10px 2px 0; vertical-align: top; }
td.sw { width: 14px; } td.sw span { display: inline-block; width: 12px; height: 12px; }
td.peak { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.site { word-break: break-all; }
</style></head><body>
<h1>capalloc allocation timeline</h1>
`

// writeTimelinePage writes the page for the histories.
func writeTimelinePage(w io.Writer, hs []memmap.History, single bool) {
	io.WriteString(w, timelineHead)
	q := ""
	if single && len(hs) == 1 {
		q = "?allocator=" + url.QueryEscape(hs[0].Allocator)
	}
	fmt.Fprintf(w, `<p class="sub"><a href="./">index</a> · <a href="history.json%s">history.json</a> · x: the events kept, oldest left; y: bytes. Hover a mark or a site for details.</p>`+"\n", html.EscapeString(q))
	if len(hs) == 0 {
		io.WriteString(w, "<p>No open allocator.</p>\n")
	}
	for _, h := range hs {
		esc := html.EscapeString(printable(h.Allocator))
		fmt.Fprintf(w, "<h2>%s</h2>\n", esc)
		if h.Capacity == 0 {
			io.WriteString(w, `<p class="note">History off: open the allocator with <code>alloc.Options{History: 100000}</code> (events kept) to record its timeline.</p>`+"\n")
			continue
		}
		tl := newTimeline(h, tlColumns)
		fmt.Fprintf(w, `<div class="sub">%s · %s · %s</div>`+"\n", html.EscapeString(printable(h.Backend)), html.EscapeString(printable(h.Device)), html.EscapeString(historySummary(tl)))
		if len(h.Events) == 0 {
			io.WriteString(w, "<p>No event recorded yet.</p>\n")
			continue
		}
		writeTimelineSVG(w, tl)
		writeTimelineLegend(w, tl)
	}
	io.WriteString(w, "</body></html>\n")
}

// historySummary says what the chart covers.
func historySummary(tl *timeline) string {
	h := tl.h
	if len(h.Events) == 0 {
		return fmt.Sprintf("keeps %s events", formatCount(uint64(h.Capacity)))
	}
	first, last := h.Events[0], h.Events[len(h.Events)-1]
	var peak int64
	for _, e := range h.Events {
		peak = max(peak, e.InUse)
	}
	s := fmt.Sprintf("events %s to %s of %s recorded (keeps %s), %s to %s after the start; peak in use %s",
		formatCount(first.Seq), formatCount(last.Seq), formatCount(h.Recorded), formatCount(uint64(h.Capacity)),
		durationText(first.Time), durationText(last.Time), bytesText(peak))
	if n := len(tl.ooms); n > 0 {
		s += fmt.Sprintf("; %d out-of-memory error(s)", n)
	}
	if h.Truncated > 0 {
		s += fmt.Sprintf("; the %s older events kept are not read (max_events)", formatCount(uint64(h.Truncated)))
	}
	return s
}

// durationText writes d to the clock's millisecond.
func durationText(d time.Duration) string { return d.Round(time.Millisecond).String() }

// writeTimelineSVG draws the chart.
func writeTimelineSVG(w io.Writer, tl *timeline) {
	n := len(tl.points)
	step := float64(tlRight-tlLeft) / float64(n)
	xAt := func(k int) float64 { return tlLeft + float64(k)*step }
	top := niceCeil(tl.maxBytes)
	yAt := func(b int64) float64 { return tlBottom - float64(b)/float64(top)*(tlBottom-tlTop) }
	// xOf places an event index: at its point, or the point drawn for its column.
	xOf := func(i int) float64 {
		k := 0
		for k+1 < n && tl.points[k+1] <= i {
			k++
		}
		return xAt(k) + step/2
	}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" font-family="sans-serif" font-size="14" role="img">`+"\n", tlWidth, tlHeight)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", tlWidth, tlHeight)
	for _, c := range tl.captures { // captures shaded behind
		x0, x1 := xOf(c[0])-step/2, xOf(c[1])+step/2
		fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#e3eefa"><title>capture: events %d to %d</title></rect>`+"\n",
			x0, tlTop, max(x1-x0, 1), tlBottom-tlTop, tl.h.Events[c[0]].Seq, tl.h.Events[c[1]].Seq)
	}
	for i := 0; i <= 4; i++ { // the byte axis
		b := top * int64(i) / 4
		y := yAt(b)
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e4e4e4"/>`+"\n", tlLeft, y, tlRight, y)
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" fill="#444">%s</text>`+"\n", tlLeft-6, y+4, bytesText(b))
	}
	// Reserved, behind: a step line over a light area.
	fmt.Fprintf(w, `<path d="%s" fill="#ececec" stroke="#9a9a9a" stroke-width="1"><title>reserved from the driver (segments)</title></path>`+"\n", stepArea(tl.reserved, nil, xAt, yAt))
	// In use, stacked by site, the largest at the bottom.
	base := make([]int64, n)
	for _, s := range tl.sites {
		topv := make([]int64, n)
		for k := range n {
			topv[k] = base[k] + s.values[k]
		}
		fmt.Fprintf(w, `<path d="%s" fill="%s" fill-opacity="0.9"><title>%s: peak %s</title></path>`+"\n",
			stepArea(topv, base, xAt, yAt), s.color, html.EscapeString(printable(s.label)), bytesText(s.peak))
		base = topv
	}
	for _, i := range tl.closes { // graph closes: ticks on the axis
		x := xOf(i)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-width="1.5"><title>graph closed (event %d)</title></line>`+"\n", x, tlBottom, x, tlBottom+7, tl.h.Events[i].Seq)
	}
	for _, i := range tl.ooms { // out-of-memory errors: red rules
		e := tl.h.Events[i]
		x := xOf(i)
		fmt.Fprintf(w, `<g><title>out of memory (event %d, %s): %s</title><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-width="2"/><text x="%.1f" y="%d" fill="#d62728" text-anchor="middle" font-weight="bold">OOM</text></g>`+"\n",
			e.Seq, durationText(e.Time), html.EscapeString(printable(e.Detail)), x, tlTop, x, tlBottom, x, tlTop-6)
	}
	fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#666"/>`+"\n", tlLeft, tlBottom, tlRight, tlBottom)
	for _, k := range []int{0, n / 2, n - 1} { // the event axis: first, middle, last point
		e := tl.h.Events[tl.points[k]]
		anchor := map[bool]string{true: "start", false: "middle"}[k == 0]
		if k == n-1 && n > 1 {
			anchor = "end"
		}
		x := xAt(k) + step/2
		if anchor == "start" {
			x = tlLeft
		} else if anchor == "end" {
			x = tlRight
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="%s" fill="#444">event %s · %s</text>`+"\n", x, tlBottom+22, anchor, formatCount(e.Seq), durationText(e.Time))
	}
	io.WriteString(w, "</svg>\n")
}

// stepArea is the path of the area between the steps of top and base (the
// axis when nil), each value held across its point's column.
func stepArea(top, base []int64, xAt func(int) float64, yAt func(int64) float64) string {
	var b strings.Builder
	n := len(top)
	fmt.Fprintf(&b, "M%.1f %.1f", xAt(0), yAt(at(base, 0)))
	for k := range n {
		fmt.Fprintf(&b, "L%.1f %.1fL%.1f %.1f", xAt(k), yAt(top[k]), xAt(k+1), yAt(top[k]))
	}
	for k := n - 1; k >= 0; k-- {
		fmt.Fprintf(&b, "L%.1f %.1fL%.1f %.1f", xAt(k+1), yAt(at(base, k)), xAt(k), yAt(at(base, k)))
	}
	b.WriteString("Z")
	return b.String()
}

func at(v []int64, k int) int64 {
	if v == nil {
		return 0
	}
	return v[k]
}

// niceCeil rounds b up to four equal steps, each a power of two bytes or
// one and a half times one (1 MiB, 1.5 MiB, 2 MiB, 3 MiB ...), so the
// axis' quarters read as round figures; at least 4 KiB.
func niceCeil(b int64) int64 {
	for step := int64(1 << 10); ; step *= 2 {
		if 4*step >= b {
			return 4 * step
		}
		if 6*step >= b {
			return 6 * step
		}
	}
}

// writeTimelineLegend names the sites, with their peaks and stacks.
func writeTimelineLegend(w io.Writer, tl *timeline) {
	io.WriteString(w, `<table class="legend">`+"\n")
	row := func(color, label, title, peak string) {
		fmt.Fprintf(w, `<tr title="%s"><td class="sw"><span style="background:%s"></span></td><td class="site">%s</td><td class="peak">%s</td></tr>`+"\n",
			html.EscapeString(title), color, html.EscapeString(label), peak)
	}
	for _, s := range tl.sites {
		row(s.color, printable(s.label), s.detail, "peak "+bytesText(s.peak))
	}
	var peak int64
	for _, r := range tl.reserved {
		peak = max(peak, r)
	}
	row("#ececec;border:1px solid #9a9a9a;box-sizing:border-box", "reserved from the driver: segments, behind the buffers", "", "peak "+bytesText(peak))
	row("#e3eefa", "a capture recording", "", "")
	row("#d62728", "OOM: an out-of-memory error (hover for its reason)", "", "")
	io.WriteString(w, "</table>\n")
}

// frameLabel is a frame as the legend shows it: the function without its
// package path, and its file and line.
func frameLabel(f memmap.Frame) string {
	fn := f.Function
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		fn = fn[i+1:]
	}
	return fmt.Sprintf("%s (%s:%d)", fn, path.Base(f.File), f.Line)
}

// stackText is a stack, a frame a line, for a tooltip: printable but
// for its line breaks.
func stackText(fs []memmap.Frame) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, "%s (%s:%d)\n", printable(f.Function), printable(f.File), f.Line)
	}
	return b.String()
}
