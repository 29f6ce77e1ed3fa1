package allocview_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

// historyEngine opens an allocator named name with opts on a 64 MiB cpu
// driver, closed with it when the test ends.
func historyEngine(t *testing.T, name string, opts alloc.Options) *alloc.Allocator {
	t.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: 64 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	opts.Name = name
	return alloctest.New(t, d, opts)
}

func weightsSite(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(8 << 20) }

func stepSite(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(512 << 10) }

// run is a short engine: weights, steps that allocate and free, a
// captured step, and a request larger than the device.
func run(t *testing.T, a *alloc.Allocator) {
	w, err := weightsSite(a)
	require.NoError(t, err)
	for range 5 {
		s, err := stepSite(a)
		require.NoError(t, err)
		require.NoError(t, a.Free(s))
	}
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		_, err := stepSite(a)
		return err
	})
	require.NoError(t, err)
	_, err = a.Alloc(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, g.Close())
	require.NoError(t, a.Free(w))
}

// history.json is WriteHistory's history, of one allocator or (an
// array) of every open one; the timeline page draws it, self-contained:
// the sites named in the legend, the out-of-memory error marked with its
// reason, the capture shaded, and a note for an allocator without one.
func TestHistoryViews(t *testing.T) {
	on := historyEngine(t, "history-on", alloc.Options{History: 1000})
	historyEngine(t, "history-off", alloc.Options{})
	run(t, on)
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()

	resp, body := get(t, srv.URL+"/history.json?allocator=history-on")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var got memmap.History
	require.NoError(t, json.Unmarshal(body, &got))
	var direct bytes.Buffer
	require.NoError(t, on.WriteHistory(&direct))
	var want memmap.History
	require.NoError(t, json.Unmarshal(direct.Bytes(), &want))
	require.Equal(t, want.Events, got.Events)
	require.Equal(t, want.Stacks, got.Stacks)

	_, body = get(t, srv.URL+"/history.json")
	var all []memmap.History
	require.NoError(t, json.Unmarshal(body, &all))
	capacity := map[string]int{}
	for _, h := range all {
		capacity[h.Allocator] = h.Capacity
	}
	require.Equal(t, 1000, capacity["history-on"])
	require.Contains(t, capacity, "history-off")
	require.Zero(t, capacity["history-off"])

	resp, body = get(t, srv.URL+"/timeline")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	page := string(body)
	require.Contains(t, page, "<h2>history-on</h2>")
	require.Contains(t, page, "<h2>history-off</h2>")
	require.Contains(t, page, "History off: open the allocator with <code>alloc.Options{History: 100000}</code>")
	svgs := regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1)
	require.Len(t, svgs, 1, "a chart for the allocator with a history")
	requireWellFormedXML(t, []byte(svgs[0]))
	require.Regexp(t, `<title>out of memory \(event \d+, [^)]*\): [^<]*larger than the whole device`, svgs[0])
	require.Contains(t, svgs[0], `fill="#e3eefa"><title>capture: events`)
	require.Contains(t, svgs[0], `<title>graph closed (event`)
	require.Regexp(t, `<td class="site"><a class="zoom" href="timeline\?allocator=history-on&amp;site=[^"]+">allocview_test.weightsSite \(history_test.go:\d+\)</a></td><td class="peak">peak 8 MiB</td>`, page)
	require.Regexp(t, `<td class="site"><a class="zoom" href="timeline\?allocator=history-on&amp;site=[^"]+">allocview_test.stepSite \(history_test.go:\d+\)</a></td><td class="peak">peak 512 KiB</td>`, page)
	require.Regexp(t, `<tr title="github.com/capalloc/capalloc/alloc/allocview_test.weightsSite \(\S+history_test.go:\d+\)\ngithub.com/capalloc/capalloc/alloc/allocview_test.run `, page, "the whole stack in the tooltip")
	for _, external := range []string{"<script", "src=", "url(", "@import", "<link"} {
		require.NotContains(t, page, external, "self-contained")
	}
	for _, u := range regexp.MustCompile(`https?://[^"'\s<]*`).FindAllString(page, -1) {
		require.Equal(t, "http://www.w3.org/2000/svg", u, "nothing fetched from outside")
	}

	_, body = get(t, srv.URL+"/")
	require.Contains(t, string(body), `<a href="timeline">allocation timeline</a>`)
	_, body = get(t, srv.URL+"/timeline?allocator=history-on")
	require.Contains(t, string(body), `<a href="history.json?allocator=history-on">history.json</a>`)
	require.NotContains(t, string(body), "history-off")
}

// The timeline's views: a site's buffers alone (the bytes reserved, every
// site's, not drawn), the baseline taken out (the weights, held
// throughout, leave the axis to the step), a range of events; a bad
// query is a 400 that says why.
func TestTimelineViews(t *testing.T) {
	a := historyEngine(t, "history-views", alloc.Options{History: 1000})
	run(t, a)
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()

	_, body := get(t, srv.URL+"/timeline?allocator=history-views&site=stepSite")
	page := string(body)
	require.Contains(t, page, "Showing buffers of sites matching &#34;stepSite&#34;")
	require.NotContains(t, page, "weightsSite (history_test.go", "the other site is filtered out")
	require.NotContains(t, page, "reserved from the driver (segments)</title>", "reserved is every site's")
	require.Regexp(t, `allocview_test.stepSite \(history_test.go:\d+\)</a></td><td class="peak">peak 512 KiB`, page)

	_, body = get(t, srv.URL+"/timeline?allocator=history-views&baseline=out")
	page = string(body)
	require.Contains(t, page, "the baseline, 0 B held throughout, taken out", "weights are freed at the end: nothing is held throughout")
	require.Contains(t, page, `href="timeline?allocator=history-views"`, "a link back to everything")

	var h memmap.History
	var buf bytes.Buffer
	require.NoError(t, a.WriteHistory(&buf))
	require.NoError(t, json.Unmarshal(buf.Bytes(), &h))
	var weightsAt, weightsFreed uint64
	for _, e := range h.Events {
		switch {
		case e.Kind == memmap.EventAlloc && e.Size == 8<<20:
			weightsAt = e.Seq
		case e.Kind == memmap.EventFree && e.Size == 8<<20:
			weightsFreed = e.Seq
		}
	}
	_, body = get(t, srv.URL+fmt.Sprintf("/timeline?allocator=history-views&baseline=out&from=%d&to=%d", weightsAt, weightsFreed-1))
	page = string(body)
	require.Contains(t, page, "the baseline, 8 MiB held throughout, taken out", "the weights, held over the range, are the baseline")
	require.Regexp(t, `allocview_test.weightsSite \(history_test.go:\d+\)</a></td><td class="peak">peak 0 B`, page)

	for _, q := range []string{"from=x", "to=1&from=5", "baseline=maybe"} {
		resp, body := get(t, srv.URL+"/timeline?allocator=history-views&"+q)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
		require.Contains(t, string(body), "bad timeline view", q)
	}
}
