package allocview_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// discard is a ResponseWriter that keeps the status and counts the body,
// so that what a request allocates is the server's.
type discard struct {
	h      http.Header
	status int
	n      int
}

func (d *discard) Header() http.Header { return d.h }
func (d *discard) WriteHeader(s int)   { d.status = s }
func (d *discard) Write(p []byte) (int, error) {
	d.n += len(p)
	return len(p), nil
}

// allocatedPerRequest serves url runs times and returns the bytes the
// process allocated per request, and the last response.
func allocatedPerRequest(t *testing.T, url string, runs int) (uint64, *discard) {
	t.Helper()
	h := allocview.Handler()
	var w *discard
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		w = &discard{h: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, url, nil))
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs), w
}

// A history of 200,000 events costs each request to history.json or the
// timeline the window it reads (DefaultMaxEvents, at most MaxEvents), not
// the history: what a request allocates, of which the copy taken under
// the history's lock is a part (256 B an event), stays within a bound set
// by the window. The whole history cost 344-380 MiB a request.
func TestHistoryViewsCostIsBounded(t *testing.T) {
	const events = 200_000
	a := historyEngine(t, "history-cost", alloc.Options{History: events})
	for range events / 2 {
		b, err := a.Alloc(4 << 10)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	for _, tc := range []struct {
		query string
		bound uint64
	}{
		{"", 16 << 20}, // DefaultMaxEvents
		{"&max_events=" + strconv.Itoa(allocview.MaxEvents), 128 << 20}, // the cap
	} {
		for _, view := range []string{"history.json", "timeline"} {
			url := "/" + view + "?allocator=history-cost" + tc.query
			perRequest, w := allocatedPerRequest(t, url, 3)
			require.Equal(t, http.StatusOK, w.status, url)
			t.Logf("%s: %.1f MiB allocated a request, a body of %.1f MiB", url, float64(perRequest)/(1<<20), float64(w.n)/(1<<20))
			require.Less(t, perRequest, tc.bound, url)
		}
	}
}

// history.json lists the newest max_events events (DefaultMaxEvents
// unless asked), numbered as in the whole history, and says how many
// older ones it keeps but left out (truncated); a count above MaxEvents,
// or not a count, is refused.
func TestHistoryViewsWindow(t *testing.T) {
	a := historyEngine(t, "history-window", alloc.Options{History: 50})
	for range 40 {
		b, err := a.Alloc(4 << 10)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	read := func(query string) memmap.History {
		resp, body := get(t, srv.URL+"/history.json?allocator=history-window"+query)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var h memmap.History
		require.NoError(t, json.Unmarshal(body, &h))
		return h
	}
	whole := read("")
	require.Len(t, whole.Events, 50)
	require.Zero(t, whole.Truncated)
	for _, n := range []int{0, 1, 7, 50} {
		h := read("&max_events=" + strconv.Itoa(n))
		require.Equal(t, whole.Recorded, h.Recorded)
		require.Len(t, h.Events, n)
		require.Equal(t, 50-n, h.Truncated, "max_events=%d", n)
		for i, e := range h.Events { // the newest, numbered as in the whole
			w := whole.Events[50-n+i]
			require.Equal(t, whole.Stacks[w.Stack], h.Stacks[e.Stack])
			w.Stack = e.Stack // an index into each one's own table
			require.Equal(t, w, e)
		}
	}
	_, body := get(t, srv.URL+"/timeline?allocator=history-window&max_events=7")
	require.Contains(t, string(body), fmt.Sprintf("events %d to %d of %d recorded (keeps 50)", whole.Recorded-7, whole.Recorded-1, whole.Recorded))
	require.Contains(t, string(body), "the 43 older events kept are not read (max_events)")
	for _, bad := range []string{"-1", "lots", strconv.Itoa(allocview.MaxEvents + 1)} {
		for _, view := range []string{"history.json", "timeline"} {
			resp, body := get(t, srv.URL+"/"+view+"?max_events="+bad)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
			require.Contains(t, string(body), "want a count of events from 0 to "+strconv.Itoa(allocview.MaxEvents))
		}
	}
}
