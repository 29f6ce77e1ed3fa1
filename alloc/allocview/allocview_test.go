package allocview_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/cpu"
)

// engine is an allocator in every state the views draw: live buffers, a
// workspace, a hole, a cached segment, a graph owning one allocation and
// holding a buffer freed during its capture.
func engine(t *testing.T, name string) *alloc.Allocator {
	t.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
	require.NoError(t, err)
	a, err := alloc.New(d, alloc.Options{Name: name})
	require.NoError(t, err)
	var bufs []alloc.Buffer
	for _, n := range []int64{300 << 10, 200 << 10, 100 << 10, 40 << 20} {
		b, err := a.Alloc(n)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	require.NoError(t, a.Free(bufs[1])) // a hole
	require.NoError(t, a.Free(bufs[3])) // a cached segment
	_, err = a.Workspace("attn", 64<<10)
	require.NoError(t, err)
	kv, err := a.Alloc(128 << 10)
	require.NoError(t, err)
	t.Cleanup(func() { // after the graph's (registered later)
		require.NoError(t, a.Free(bufs[0]))
		require.NoError(t, a.Free(bufs[2]))
		require.NoError(t, a.Close())
		require.NoError(t, d.Close())
	})
	alloctest.CaptureHolding(t, a, kv, 512<<10)
	return a
}

func get(t *testing.T, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// withRate sets the process's profile rate until the test ends.
func withRate(t testing.TB, rate int) {
	t.Helper()
	prev, err := alloc.SetProfileRate(rate)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = alloc.SetProfileRate(prev) })
}

func requireWellFormedXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err, "segments.svg is not well-formed XML")
	}
}

// An unknown allocator is a 404 naming the open ones, on every view; an
// unknown view is a 404 naming the views.
func TestUnknownNames(t *testing.T) {
	engine(t, "view-known")
	mux := http.NewServeMux()
	mux.Handle("/mem/", allocview.Handler()) // mounted elsewhere
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, view := range []string{"", "segments.svg", "profile", "snapshot.json"} {
		resp, body := get(t, srv.URL+"/mem/"+view+"?allocator=no-such")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, view)
		require.Contains(t, string(body), `no open allocator named "no-such"`)
		require.Contains(t, string(body), `"view-known"`, "the 404 lists the open allocators")
	}
	resp, body := get(t, srv.URL+"/mem/heap")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, string(body), "segments.svg, profile, snapshot.json")
	resp, _ = get(t, srv.URL+"/mem/?allocator=view-known")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the views work under another mount point")
}

// With recording off the profile is a 200 with a valid, empty profile
// that says how to turn recording on (the choice the package documents).
func TestProfileWhileRecordingIsOff(t *testing.T) {
	withRate(t, 0)
	a := engine(t, "view-off")
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	resp, body := get(t, srv.URL+"/profile?allocator="+registry.Name(a))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "0", resp.Header.Get("X-Capalloc-Profile-Rate"))
	p, err := profile.ParseData(body)
	require.NoError(t, err)
	require.Empty(t, p.Sample)
	require.Contains(t, strings.Join(p.Comments, "\n"), "alloc.SetProfileRate(512 << 10)")
	_, body = get(t, srv.URL+"/")
	require.Contains(t, string(body), "Profile recording is off")
}

// An accepted name with markup and control characters is escaped on the
// index page (shown with U+FFFD for what is not text, carried whole in
// the links' query) and in the segment map (issue 27, item 5).
func TestViewsEscapeNames(t *testing.T) {
	const name = "view-\x01<b>&\"'"
	engine(t, name)
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	_, body := get(t, srv.URL+"/")
	require.True(t, utf8.Valid(body))
	for _, r := range string(body) {
		require.False(t, unicode.IsControl(r) && r != '\n' && r != '\t', "control character %U on the index page", r)
	}
	page := string(body)
	require.Contains(t, page, "<h2>view-\uFFFD&lt;b&gt;&amp;&#34;&#39;</h2>")
	require.Contains(t, page, `<img src="segments.svg?allocator=view-%01%3cb%3e%26%22%27&amp;tables=off"`)
	require.NotContains(t, page, "<b>")

	resp, body := get(t, srv.URL+"/segments.svg?allocator="+url.QueryEscape(name))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	requireWellFormedXML(t, body)
	require.Contains(t, string(body), ">view-\uFFFD&lt;b&gt;&amp;&#34;&#39;</text>")
}
