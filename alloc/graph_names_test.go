package alloc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// A graph's number is given when its capture begins, is the same in every
// snapshot, and is never given again in the process, whichever allocator
// captures; its name is the capture's.
func TestGraphIDsAreStableAndNeverReused(t *testing.T) {
	a, _ := newPoolAllocator(t, poolStep)
	b, _ := newPoolAllocator(t, poolStep)
	out, err := a.Alloc(512)
	require.NoError(t, err)
	seen := map[int]bool{}
	var graphs []*alloc.Graph
	for i, al := range []*alloc.Allocator{a, b, a, b} {
		g, err := al.WithCapture(alloc.CaptureOptions{Name: []string{"batch-1", "batch-2", "batch-3", ""}[i]}, func() error {
			tmp, err := al.Alloc(4096)
			if err != nil {
				return err
			}
			return al.Free(tmp)
		})
		require.NoError(t, err)
		require.False(t, seen[g.ID()], "graph number %d given twice", g.ID())
		require.Positive(t, g.ID())
		seen[g.ID()] = true
		graphs = append(graphs, g)
	}
	require.Equal(t, "batch-1", graphs[0].Name())
	require.Equal(t, "", graphs[3].Name())
	ids := func() []int {
		s, err := a.Snapshot()
		require.NoError(t, err)
		var out []int
		for _, g := range s.Graphs {
			out = append(out, g.ID)
		}
		return out
	}
	first := ids()
	require.Equal(t, []int{graphs[0].ID(), graphs[2].ID()}, first)
	require.NoError(t, graphs[0].Close())
	require.Equal(t, []int{graphs[2].ID()}, ids(), "closing one renumbers none")
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error { return nil })
	require.NoError(t, err)
	require.False(t, seen[g.ID()], "a closed graph's number came back")
	graphs = append(graphs[1:], g)
	for _, g := range graphs {
		require.NoError(t, g.Close())
	}
	closeAll(t, a, out)
	require.NoError(t, b.Close())
}

// A pool has a name (SetName) and a number, and its graphs name it in the
// snapshot.
func TestGraphPoolNameInTheSnapshot(t *testing.T) {
	a, _, out := newPoolOut(t, poolStep)
	gp := a.NewGraphPool()
	require.Equal(t, "", gp.Name())
	gp.SetName("decode")
	require.Equal(t, "decode", gp.Name())
	g, _ := captureStep(t, a, gp, poolStep, 1, out, false)
	s, err := a.Snapshot()
	require.NoError(t, err)
	require.Len(t, s.Pools, 1)
	p := s.Pools[0]
	require.Equal(t, "decode", p.Name)
	require.Equal(t, []int{g.ID()}, p.Graphs)
	require.Equal(t, gp.Bytes(), p.Bytes)
	require.Len(t, s.Graphs, 1)
	require.Equal(t, p.ID, s.Graphs[0].Pool)
	require.Equal(t, fmt.Sprintf("decode (pool %d)", p.ID), p.Label())
	closeAll(t, a, out, g, gp)
}

// The leak report at Close names what is open: a graph by name and
// number, with its pool; a pool closed before its graph is not reported
// as open, and the report says its memory waited for the graph.
func TestLeakReportNamesGraphsAndPools(t *testing.T) {
	a, _, out := newPoolOut(t, poolStep)
	gp := a.NewGraphPool()
	gp.SetName("decode")
	g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp, Name: "batch-8"}, func() error {
		_, err := a.Alloc(4096)
		return err
	})
	require.NoError(t, err)
	require.NoError(t, gp.Close(), "the pool closes; its memory waits for its graph")
	open := a.NewGraphPool()
	open.SetName("prefill")
	require.NoError(t, a.Free(out))
	err = a.Close()
	require.ErrorIs(t, err, alloc.ErrLeaked)
	msg := err.Error()
	require.Contains(t, msg, fmt.Sprintf(`1 graph(s) not closed: "batch-8" (graph %d) of graph pool "decode" (pool `, g.ID()))
	require.Contains(t, msg, "which was closed and kept its memory for this graph")
	require.Contains(t, msg, `1 graph pool(s) not closed: "prefill" (pool `)
	require.NotContains(t, msg, `"decode" (pool 1) not closed`)
	require.Equal(t, 1, strings.Count(msg, "graph pool(s) not closed"), msg)
}
