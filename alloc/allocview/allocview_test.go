package allocview_test

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
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
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
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
	h, err := a.HostAlloc(4 << 10)
	require.NoError(t, err)
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := a.UploadHost(kv, 0, h, 0, 4<<10); err != nil {
			return err
		}
		if err := a.Free(kv); err != nil {
			return err
		}
		_, err := a.Alloc(512 << 10)
		return err
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, g.Close())
		require.NoError(t, h.Close())
		require.NoError(t, a.Free(bufs[0]))
		require.NoError(t, a.Free(bufs[2]))
		require.NoError(t, a.Close())
		require.NoError(t, d.Close())
	})
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

// Importing the package mounts the views on http.DefaultServeMux, as
// net/http/pprof does; each of the four answers with its content.
func TestViewsOnDefaultMux(t *testing.T) {
	withRate(t, 1)
	a := engine(t, "view-default")
	srv := httptest.NewServer(http.DefaultServeMux)
	defer srv.Close()
	base := srv.URL + allocview.Prefix
	q := "?allocator=" + url.QueryEscape(registry.Name(a))

	resp, body := get(t, base)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	page := string(body)
	require.Contains(t, page, "<h2>view-default</h2>")
	require.Contains(t, page, `<img src="segments.svg?allocator=view-default&amp;tables=off"`, "the map without the tables the page lists")
	require.Contains(t, page, "allocations in captures")
	require.Contains(t, page, "<td>live graphs</td><td class=\"v\">1</td>", "the counters")
	require.Contains(t, page, "<td>out-of-memory errors / reclaim retries</td><td class=\"v\">0 / 0</td>")
	snap, err := a.Snapshot()
	require.NoError(t, err)
	require.Contains(t, page, fmt.Sprintf("<td>fragmentation outside graphs (reserved / in use)</td><td class=\"v\">%.2f</td>", snap.Fragmentation()))
	require.Contains(t, page, "<td>held by graphs (owned, pools, held)</td><td class=\"v\">640 KiB</td>", "graphs' memory apart")
	require.Regexp(t, `<tr><td>graph \d+</td><td>-</td><td class="n" title="1 block">512 KiB</td><td class="n" title="1 block">128 KiB</td>`, page, "a graph is a row of the graphs table")
	require.Contains(t, page, "<td>memory limit (reserved at most)</td><td class=\"v\">none</td>")
	require.Contains(t, page, "capture safety "+a.Info().SafetyProfile(), "the device's capture safety profile")

	resp, body = get(t, base+"segments.svg"+q)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "image/svg+xml", resp.Header.Get("Content-Type"))
	requireWellFormedXML(t, body)
	svg := string(body)
	for _, colour := range []string{"#4e79a7", "#9467bd", "#e15759", "#f28e2b", "#e6e6e6", "#b5d99c"} {
		require.Contains(t, svg, `fill="`+colour+`"><title>`, "a block drawn in every state's colour")
	}
	require.Regexp(t, `>graph-owned</text><text [^>]+>512 KiB</text>`, svg, "the legend has the bytes by state")
	require.Regexp(t, `>held-for-graph</text><text [^>]+>128 KiB</text>`, svg)
	require.Regexp(t, `>graph \d+</text><text [^>]+>-</text><text [^>]+>512 KiB</text><text [^>]+>128 KiB</text>`, svg, "the graphs table's row")

	resp, body = get(t, base+"profile"+q)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p, err := profile.ParseData(body)
	require.NoError(t, err)
	owners := map[string]bool{}
	for _, s := range p.Sample {
		require.Equal(t, []string{"view-default"}, s.Label["allocator"])
		owners[s.Label["owner"][0]] = true
	}
	for _, o := range []string{"pool-live", "workspace", "graph-owned", "held-for-graph", "pinned-host"} {
		require.True(t, owners[o], "owner %s in %v", o, owners)
	}

	resp, body = get(t, base+"snapshot.json"+q)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var s memmap.Snapshot
	require.NoError(t, json.Unmarshal(body, &s))
	want, err := a.Snapshot()
	require.NoError(t, err)
	require.Equal(t, want.Segments, s.Segments)
	require.Equal(t, want.Graphs, s.Graphs)

	// Without ?allocator: every allocator, the snapshot as an array.
	b := engine(t, "view-other")
	_, body = get(t, base+"snapshot.json")
	var all []memmap.Snapshot
	require.NoError(t, json.Unmarshal(body, &all))
	var names []string
	for _, s := range all {
		names = append(names, s.Allocator)
	}
	require.Subset(t, names, []string{registry.Name(a), registry.Name(b)})
	_, body = get(t, base+"segments.svg")
	requireWellFormedXML(t, body)
	require.Contains(t, string(body), ">view-other</text>")
	require.Contains(t, string(body), ">view-default</text>")
	_, body = get(t, base+"profile")
	p, err = profile.ParseData(body)
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, s := range p.Sample {
		seen[s.Label["allocator"][0]] = true
	}
	require.True(t, seen["view-default"] && seen["view-other"], "the process's profile: %v", seen)
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

// The expvar "capalloc" carries every open allocator's counters and its
// bytes by state, at /debug/vars.
func TestExpvar(t *testing.T) {
	a := engine(t, "view-expvar")
	srv := httptest.NewServer(http.DefaultServeMux)
	defer srv.Close()
	_, body := get(t, srv.URL+"/debug/vars")
	var vars struct {
		Capalloc struct {
			ProfileRate int                                `json:"profile_rate"`
			Allocators  map[string]allocview.AllocatorVars `json:"allocators"`
		} `json:"capalloc"`
	}
	require.NoError(t, json.Unmarshal(body, &vars))
	v, ok := vars.Capalloc.Allocators["view-expvar"]
	require.True(t, ok, "%s", body)
	require.Equal(t, a.Stats(), v.Stats)
	require.Equal(t, "cpu", v.Backend)
	require.EqualValues(t, 512<<10, v.Bytes[memmap.BlockGraphOwned])
	s := a.Stats()
	graphs := v.Bytes[memmap.BlockGraphOwned] + v.Bytes[memmap.BlockGraphPool] + v.Bytes[memmap.BlockHeldForGraph]
	require.Equal(t, graphs, v.GraphBytes)
	require.InDelta(t, float64(s.BytesReserved-graphs)/float64(s.BytesInUse-512<<10), v.Fragmentation, 1e-9, "graphs' memory left out of both terms (its live 512 KiB buffer of in use)")
	require.EqualValues(t, 1<<30, v.DeviceTotal)
	require.NotNil(t, v.DeviceFree, "the cpu driver tells its free memory: %s", body)
	free, _, err := a.Driver().(driver.MemInfoer).MemInfo()
	require.NoError(t, err)
	require.Equal(t, free, *v.DeviceFree)
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
