package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// The workload loads and the segment map shows both allocators, the graph's
// memory and the held page.
func TestWorkloadServes(t *testing.T) {
	prev, _ := alloc.SetProfileRate(1)
	defer alloc.SetProfileRate(prev)
	d, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	defer d.Close()
	w, err := load(d)
	require.NoError(t, err)
	srv := httptest.NewServer(http.DefaultServeMux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/capalloc/segments.svg")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, want := range []string{">decoder</text>", ">prefill</text>", ">graph-owned</text><text [^>]+>6.1 MiB</text>", ">batch-8 \\(graph \\d+\\)</text><text [^>]+>decode \\(pool \\d+\\)</text>", ">held-for-graph</text><text [^>]+>256 KiB</text>",
		">workspace</text><text [^>]+>1.5 MiB</text>", `<title>live: 4 KiB\noffset 0x[0-9a-f]+ in the small segment @0x[0-9a-f]+\nallocated at [^ ]+memview.seqLengths main.go:\d+\n`} {
		require.Regexp(t, want, string(body))
	}
	w.close()
	_, err = w.decoder.Snapshot()
	require.ErrorIs(t, err, alloc.ErrClosed, "close closes the allocators")
	again, err := alloc.New(d, alloc.Options{Name: "decoder"})
	require.NoError(t, err, "a closed allocator's name is free again")
	require.NoError(t, again.Close())
}
