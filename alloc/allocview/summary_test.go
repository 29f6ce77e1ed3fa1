package allocview_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/allocview"
)

// summary.txt is each allocator's memory summary as text, the one the
// allocator's Summary writes; ?allocator= picks one, an unknown name is a
// 404 naming the open ones, and the index links to it.
func TestSummaryView(t *testing.T) {
	a := engine(t, "view-summary")
	engine(t, "view-summary-2")
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()

	resp, body := get(t, srv.URL+"/summary.txt?allocator=view-summary")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	text := string(body)
	require.Equal(t, 1, strings.Count(text, "capalloc memory summary:"), text)
	require.Contains(t, text, `allocator "view-summary", backend "cpu"`)
	for _, part := range []string{"device memory by pool", "graph-owned", "out-of-memory errors 0, reclaim retries 0", "fragmentation outside graphs (reserved / in use", "held by graphs"} {
		require.Contains(t, text, part)
	}
	own := a.Summary()
	cut := func(s string) string { return s[strings.Index(s, "\n\n"):] } // past the time it was taken
	require.Equal(t, cut(own), cut(text), "the view serves what Summary says")

	_, body = get(t, srv.URL+"/summary.txt")
	require.Contains(t, string(body), `allocator "view-summary",`)
	require.Contains(t, string(body), `allocator "view-summary-2",`, "every open allocator without ?allocator=")

	resp, body = get(t, srv.URL+"/summary.txt?allocator=no-such")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, string(body), `"view-summary"`)

	_, body = get(t, srv.URL+"/")
	require.Contains(t, string(body), `<a href="summary.txt">summary.txt</a>`)
}
