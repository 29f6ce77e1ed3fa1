// Not in the capalloc_nomount build: this test reads the metrics too, and
// client_golang links expvar, which mounts /debug/vars on
// http.DefaultServeMux (TestNoDefaultMount checks that build mounts
// nothing).

//go:build !capalloc_nomount

package allocview_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/allocprom"
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

// An engine's decode graphs: 64 graphs, one per batch size, named,
// captured into one named pool. Every view finds the pool, its bytes and
// every graph by name: the snapshot, the summary, the metrics, the index
// and the profile, whose samples of the pool sum to its bytes at rate 1.
func TestSixtyFourNamedGraphsInEveryView(t *testing.T) {
	withRate(t, 1)
	d, err := cpu.New(cpu.Options{MemoryLimit: 256 << 20})
	require.NoError(t, err)
	a, err := alloc.New(d, alloc.Options{Name: "views-decode"})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })

	const step = 8 << 10 // a batch's temporary per sequence
	warm, err := a.Alloc(64 * step)
	require.NoError(t, err)
	require.NoError(t, a.Free(warm)) // the warm-up the pool borrows from
	gp := a.NewGraphPool()
	gp.SetName("decode")
	graphs := map[string]*alloc.Graph{}
	for n := 64; n >= 1; n-- {
		name := fmt.Sprintf("batch-%d", n)
		g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp, Name: name}, func() error {
			tmp, err := a.Alloc(int64(n) * step)
			if err != nil {
				return err
			}
			if _, err := a.Alloc(int64(n) * 64); err != nil { // the graph's output: kept
				return err
			}
			return a.Free(tmp)
		})
		require.NoError(t, err)
		require.NoError(t, g.Launch())
		graphs[name] = g
	}
	require.NoError(t, a.Synchronize())
	poolBytes := gp.Bytes()
	require.Positive(t, poolBytes)
	label := func(g *alloc.Graph) string { return fmt.Sprintf("%s (graph %d)", g.Name(), g.ID()) }

	// The snapshot: the pool, its blocks summing to its bytes, its graphs.
	s, err := a.Snapshot()
	require.NoError(t, err)
	require.Len(t, s.Pools, 1)
	p := s.Pools[0]
	require.Equal(t, "decode", p.Name)
	require.Equal(t, poolBytes, p.Bytes)
	require.Len(t, p.Graphs, 64)
	var inBlocks int64
	for _, seg := range s.Segments {
		for _, blk := range seg.Blocks {
			if blk.Pool == p.ID {
				inBlocks += blk.Size
				if blk.State == memmap.BlockGraphOwned {
					require.NotZero(t, blk.Graph, "a pool block a graph holds names the graph")
					require.NotEmpty(t, blk.CallSite, "sampled at rate 1")
				}
			}
		}
	}
	require.Equal(t, poolBytes, inBlocks, "the pool's blocks are its bytes")
	byID := map[int]memmap.GraphInfo{}
	for _, gi := range s.Graphs {
		byID[gi.ID] = gi
	}
	for name, g := range graphs {
		gi, ok := byID[g.ID()]
		require.True(t, ok, name)
		require.Equal(t, name, gi.Name)
		require.Equal(t, p.ID, gi.Pool)
		require.EqualValues(t, 1, gi.Launches)
		require.Positive(t, gi.OwnedBytes, "%s owns its output", name)
	}
	poolLabel := fmt.Sprintf("decode (pool %d)", p.ID)

	// The summary: the pool's row and column, a row per graph.
	sum := strings.Join(strings.Fields(a.Summary()), " ")
	require.Contains(t, sum, fmt.Sprintf("%s %s", poolLabel, memmap.SizeText(poolBytes)))
	for _, g := range graphs {
		require.Contains(t, sum, label(g)+" "+poolLabel)
	}

	// The metrics.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(allocprom.NewCollector())
	fams, err := reg.Gather()
	require.NoError(t, err)
	found := false
	for _, f := range fams {
		if f.GetName() != "capalloc_graph_pool_bytes" {
			continue
		}
		for _, m := range f.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			if ls["allocator"] == "views-decode" && ls["pool"] == "decode" && ls["pool_id"] == fmt.Sprint(p.ID) {
				require.EqualValues(t, poolBytes, m.GetGauge().GetValue())
				found = true
			}
		}
	}
	require.True(t, found, "capalloc_graph_pool_bytes{pool=\"decode\"}")

	// The index: the pool and every graph, a table row each with its
	// figures: the largest (batch-64 down) in the graphs table, the others
	// in the <details> under it, whose summary counts them and the memory
	// they own (none holds any).
	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/?allocator=views-decode")
	require.NoError(t, err)
	var page bytes.Buffer
	_, err = page.ReadFrom(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, page.String(), "<tr><td>"+poolLabel+"</td><td class=\"n\">"+bytesText(poolBytes)+"</td>")
	folded := fmt.Sprintf("<details><summary>%d more graphs, ", 64-allocview.IndexShown)
	details := strings.Index(page.String(), folded)
	require.Positive(t, details, "the smaller graphs folded")
	var foldedBytes int64
	for name, g := range graphs {
		gi := byID[g.ID()]
		row := "<tr><td>" + label(g) + "</td><td>" + poolLabel + "</td><td class=\"n\" title=\"1 block\">" + bytesText(gi.OwnedBytes) + "</td><td class=\"n\" title=\"0 blocks\">0 B</td>"
		at := strings.Index(page.String(), row)
		require.Positive(t, at, "%s's row", name)
		var n int
		_, err := fmt.Sscanf(name, "batch-%d", &n)
		require.NoError(t, err)
		if n > 64-allocview.IndexShown {
			require.Less(t, at, details, "%s is among the largest, in the table", name)
		} else {
			require.Greater(t, at, details, "%s is folded", name)
			foldedBytes += gi.OwnedBytes
		}
	}
	require.Contains(t, page.String(), folded+bytesText(foldedBytes)+"</summary>")

	// The profile: every graph a label, and the pool's samples its bytes.
	var buf bytes.Buffer
	require.NoError(t, a.WriteProfile(&buf))
	prof, err := profile.Parse(&buf)
	require.NoError(t, err)
	var poolTotal int64
	seen := map[string]bool{}
	for _, smp := range prof.Sample {
		if smp.Label["allocator"][0] != "views-decode" {
			continue
		}
		if len(smp.Label["pool"]) > 0 && smp.Label["pool"][0] == poolLabel {
			poolTotal += smp.Value[0]
		}
		for _, g := range smp.Label["graph"] {
			seen[g] = true
		}
	}
	require.Equal(t, poolBytes, poolTotal, "pprof -top totals include the pool's bytes")
	for _, g := range graphs {
		require.True(t, seen[label(g)], "profile has no graph label %q", label(g))
	}

	for _, g := range graphs {
		require.NoError(t, g.Close())
	}
	require.NoError(t, gp.Close())
	require.NoError(t, a.Close())
}

// bytesText is the index's size text (allocview's): 1.5 MiB, 64 KiB.
func bytesText(n int64) string { return allocview.BytesText(n) }
