//go:build !capalloc_nomount

package allocview_test

// The views and the expvar as the package mounts them on import
// (mount.go); a build with -tags capalloc_nomount has neither
// (nomount_test.go).

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/internal/registry"
	"github.com/capalloc/capalloc/alloc/memmap"
)

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
