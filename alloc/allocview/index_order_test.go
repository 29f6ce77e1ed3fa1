package allocview_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

// An engine's bucket graphs, captured in no order of size, each into a
// pool of its own, four of them using a buffer the engine then frees (so
// each holds it): the index shows the allocview.IndexShown largest
// graphs and pools in its tables, largest first, and folds the rest into
// a <details> whose summary counts them and gives the memory they hold
// together, the shared buffer once; summary.txt and the segment map list
// them largest first too.
func TestIndexShowsLargestGraphsFirst(t *testing.T) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
	require.NoError(t, err)
	a, err := alloc.New(d, alloc.Options{Name: "views-order"})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })

	const buckets, unit = 20, 512 << 10
	shared, err := a.Alloc(256 << 10)
	require.NoError(t, err)
	size := map[string]int64{} // each graph's temporary, by name
	var graphs []*alloc.Graph
	var pools []*alloc.GraphPool
	for i := range buckets {
		name := fmt.Sprintf("bucket-%02d", i)
		size[name] = int64((i*7)%buckets+1) * unit // 1 to 20 units, each once, in no order
		warm, err := a.Alloc(size[name])           // the step run eagerly: its pool borrows this
		require.NoError(t, err)
		require.NoError(t, a.Free(warm))
		gp := a.NewGraphPool()
		gp.SetName("pool-" + name)
		g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp, Name: name}, func() error {
			if i%5 == 4 { // sizes 9, 4, 19 and 14 units: the largest shown, the others folded
				if err := a.Memset(shared, 0, 0, 64); err != nil {
					return err
				}
			}
			_, err := a.Alloc(size[name])
			return err
		})
		require.NoError(t, err)
		graphs, pools = append(graphs, g), append(pools, gp)
	}
	require.NoError(t, a.Free(shared)) // four graphs hold it now
	require.NoError(t, a.Synchronize())
	t.Cleanup(func() {
		for _, g := range graphs {
			require.NoError(t, g.Close())
		}
		for _, gp := range pools {
			require.NoError(t, gp.Close())
		}
		require.NoError(t, a.Close())
	})

	s, err := a.Snapshot()
	require.NoError(t, err)
	require.Len(t, s.Graphs, buckets)
	// The order the views must show: by the bytes each graph captured
	// (its owned bytes grow with them), the holders' shared buffer too
	// small to reorder them.
	order := slices.Clone(s.Graphs)
	slices.SortFunc(order, func(x, y memmap.GraphInfo) int { return int(size[y.Name] - size[x.Name]) })
	var sharedHeld int64
	for _, g := range order {
		require.Positive(t, g.OwnedBytes, g.Name)
		if g.HeldBytes > 0 {
			sharedHeld = g.HeldBytes
		}
	}
	require.Positive(t, sharedHeld, "the freed buffer is held")
	shown := allocview.IndexShown
	rest := order[shown:]
	var restMemory, restNaive int64
	holders := 0
	for _, g := range rest {
		restMemory += g.OwnedBytes
		restNaive += g.OwnedBytes + g.HeldBytes
		if g.HeldBytes > 0 {
			holders++
		}
	}
	require.GreaterOrEqual(t, holders, 2, "folded graphs share the held buffer")
	restMemory += sharedHeld // once, though several of them hold it
	require.NotEqual(t, allocview.BytesText(restNaive), allocview.BytesText(restMemory), "the test tells a shared buffer counted once from twice")

	srv := httptest.NewServer(allocview.Handler())
	defer srv.Close()
	view := func(name string) string {
		resp, body := get(t, srv.URL+"/"+name+"?allocator=views-order")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return string(body)
	}
	page := view("")
	require.NotContains(t, page, "<script", "the views are script-free")

	// The graphs: the table's rows the largest, largest first; the
	// details' summary counts the rest and their memory; its rows the
	// rest, largest first. Every row with the graph's figures.
	row := func(g memmap.GraphInfo) string {
		return fmt.Sprintf(`<tr><td>%s</td><td>pool-%s (pool `, g.Label(), g.Name)
	}
	figures := func(g memmap.GraphInfo) string {
		return fmt.Sprintf(`title="1 block">%s</td><td class="n" title="%s">%s</td>`, allocview.BytesText(g.OwnedBytes), map[bool]string{true: "1 block", false: "0 blocks"}[g.HeldBytes > 0], allocview.BytesText(g.HeldBytes))
	}
	graphsAt := strings.Index(page, "<h3>graphs</h3>")
	require.Positive(t, graphsAt)
	tables := page[graphsAt:]
	details := strings.Index(tables, "<details><summary>")
	require.Positive(t, details, "the smaller graphs are folded")
	table, folded := tables[:details], tables[details:]
	folded = folded[:strings.Index(folded, "</details>")]
	require.Contains(t, folded, fmt.Sprintf("<details><summary>%d more graphs, %s</summary>", buckets-shown, allocview.BytesText(restMemory)))
	at := 0
	for i, g := range order {
		in := table
		if i >= shown {
			in = folded
		}
		if i == shown {
			at = 0
		}
		j := strings.Index(in, row(g))
		require.GreaterOrEqual(t, j, 0, "%s is not where it belongs (%d of %d)", g.Label(), i, buckets)
		require.Greater(t, j, at-1, "%s comes after a smaller graph", g.Label())
		require.Contains(t, in[j:], figures(g), "%s's figures", g.Label())
		at = j
	}
	require.Equal(t, shown, strings.Count(table, "<tr><td>bucket-"))
	require.Equal(t, buckets-shown, strings.Count(folded, "<tr><td>bucket-"))

	// The pools: the same rule, by the bytes each borrowed.
	poolsAt := strings.Index(page, "<h3>graph pools</h3>")
	require.Positive(t, poolsAt)
	poolTables := page[poolsAt:graphsAt]
	pd := strings.Index(poolTables, "<details><summary>")
	require.Positive(t, pd, "the smaller pools are folded")
	ps := slices.Clone(s.Pools)
	slices.SortStableFunc(ps, func(x, y memmap.PoolInfo) int { return int(y.Bytes - x.Bytes) })
	require.NotEqual(t, s.Pools, ps, "the pools' order by bytes is not their IDs'")
	var restPools int64
	for i, p := range ps {
		require.Positive(t, p.Bytes, "%s borrowed its graph's bytes", p.Label())
		if i >= shown {
			restPools += p.Bytes
		}
	}
	require.Contains(t, poolTables[pd:], fmt.Sprintf("<details><summary>%d more graph pools, %s</summary>", buckets-shown, allocview.BytesText(restPools)))
	poolRow := regexp.MustCompile(`<tr><td>(pool-bucket-\d+ \(pool \d+\))</td><td class="n">([^<]*)</td>`)
	var seen []string
	for _, m := range poolRow.FindAllStringSubmatch(poolTables, -1) {
		seen = append(seen, m[1]+" "+m[2])
	}
	var want []string
	for _, p := range ps {
		want = append(want, p.Label()+" "+allocview.BytesText(p.Bytes))
	}
	require.Equal(t, want, seen, "every pool once, largest first, the first %d shown", shown)
	require.Equal(t, shown, strings.Count(poolTables[:pd], "<tr><td>pool-bucket-"))

	// summary.txt keeps every row, largest first; so does the segment
	// map's table (its bars are drawn by address).
	for name, head := range map[string]*regexp.Regexp{
		"summary.txt":  regexp.MustCompile(`\n *graphs +pool +owns`),
		"segments.svg": regexp.MustCompile(`font-weight="bold">graphs</text>`),
	} {
		body := view(name)
		m := head.FindStringIndex(body)
		require.NotNil(t, m, "%s has no graphs table", name)
		table, at := body[m[0]:], -1
		for _, g := range order {
			j := strings.Index(table, g.Label())
			require.Greater(t, j, at, "%s: %s comes after a smaller graph", name, g.Label())
			at = j
		}
	}
}
