package allocview

import (
	"fmt"
	"html"
	"io"
	"strings"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// viewLinks writes the timeline's links to other views of one
// allocator's history: plain links (no script), or, for a page read
// offline, none (there is no server to ask).
type viewLinks struct {
	page      timelinePage
	allocator string
	all       memmap.History // the history as kept, before the view
}

// href is the live timeline's address for v.
func (l viewLinks) href(v TimelineView) string {
	return "timeline" + v.query(l.allocator)
}

// wrap links inner (escaped markup) to view v; offline it is inner alone.
func (l viewLinks) wrap(inner string, v TimelineView) string {
	if l.page.offline {
		return inner
	}
	return `<a class="zoom" href="` + html.EscapeString(l.href(v)) + `">` + inner + `</a>`
}

// zoomHint ends a capture's tooltip.
func (l viewLinks) zoomHint() string {
	if l.page.offline {
		return ""
	}
	return " (click to zoom to it)"
}

// aroundEvents is how many events either side of an out-of-memory error
// its zoom shows.
const aroundEvents = 200

// write says what the chart shows, and offers the other views: every
// event, the last capture, around the first out-of-memory error, the
// baseline out or in, and a form for any range and site.
func (l viewLinks) write(w io.Writer, base int64) {
	v := l.page.view
	var what []string
	if v.From != 0 || v.To != 0 {
		to := "the last"
		if v.To != 0 {
			to = formatCount(v.To)
		}
		what = append(what, fmt.Sprintf("events %s to %s", formatCount(v.From), to))
	}
	if v.Site != "" {
		what = append(what, fmt.Sprintf("buffers of sites matching %q (reserved bytes not drawn)", printable(v.Site)))
	}
	if v.NoBaseline {
		what = append(what, "the baseline, "+bytesText(base)+" held throughout, taken out (reserved bytes not drawn)")
	}
	if l.page.offline {
		if len(what) > 0 {
			fmt.Fprintf(w, `<p class="sub">Showing %s.</p>`+"\n", html.EscapeString(strings.Join(what, "; ")))
		}
		io.WriteString(w, `<p class="sub">Other views: <code>go run ./cmd/allocview -from N -to M -site NAME -baseline=out FILE.json</code>.</p>`+"\n")
		return
	}
	var links []string
	link := func(text string, v TimelineView) {
		links = append(links, `<a href="`+html.EscapeString(l.href(v))+`">`+html.EscapeString(text)+`</a>`)
	}
	if v != (TimelineView{}) {
		link("everything", TimelineView{})
	}
	evs := l.all.Events
	var lastBegin, lastEnd, oom = -1, -1, -1
	for i, e := range evs {
		switch e.Kind {
		case memmap.EventCaptureBegin:
			lastBegin = i
		case memmap.EventCaptureEnd:
			if lastBegin >= 0 {
				lastEnd = i
			}
		case memmap.EventOutOfMemory:
			if oom < 0 {
				oom = i
			}
		}
	}
	if lastEnd > lastBegin && lastBegin >= 0 {
		// The last step: from the capture before the last one's end to the
		// last one's end, or the last capture alone.
		from := evs[lastBegin].Seq
		link("the last capture", TimelineView{From: from, To: evs[lastEnd].Seq, Site: v.Site, NoBaseline: v.NoBaseline})
	}
	if oom >= 0 {
		lo, hi := max(oom-aroundEvents, 0), min(oom+aroundEvents, len(evs)-1)
		link("around the first out-of-memory error", TimelineView{From: evs[lo].Seq, To: evs[hi].Seq, Site: v.Site, NoBaseline: v.NoBaseline})
	}
	flip := v
	flip.NoBaseline = !v.NoBaseline
	if v.NoBaseline {
		link("put the baseline back", flip)
	} else {
		link("take the baseline out (what is held throughout)", flip)
	}
	if len(what) > 0 {
		fmt.Fprintf(w, `<p class="sub">Showing %s.</p>`+"\n", html.EscapeString(strings.Join(what, "; ")))
	}
	fmt.Fprintf(w, `<p class="sub">Views: %s</p>`+"\n", strings.Join(links, " · "))
	field := func(name, value, class string) string {
		if class != "" {
			class = ` class="` + class + `"`
		}
		return fmt.Sprintf(`<input type="text" name="%s" value="%s"%s>`, name, html.EscapeString(value), class)
	}
	num := func(n uint64) string {
		if n == 0 {
			return ""
		}
		return fmt.Sprint(n)
	}
	checked := ""
	if v.NoBaseline {
		checked = " checked"
	}
	fmt.Fprintf(w, `<form class="view" method="get" action="timeline"><input type="hidden" name="allocator" value="%s">events from %s to %s · site %s · <label><input type="checkbox" name="baseline" value="out"%s> baseline out</label> <input type="submit" value="show"></form>`+"\n",
		html.EscapeString(l.allocator), field("from", num(v.From), ""), field("to", num(v.To), ""), field("site", printable(v.Site), "site"), checked)
}
