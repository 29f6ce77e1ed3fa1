package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// The loop runs out of memory once, and the history written at that
// moment names its sites, the failed growth last.
func TestDecodeWritesHistoryAtOOM(t *testing.T) {
	file := filepath.Join(t.TempDir(), "history.json")
	d, a, err := open(file)
	require.NoError(t, err)
	defer d.Close()
	g, err := decode(a, 12)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, alloc.FlushHistoryFiles(), "written in the background")

	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var h memmap.History
	require.NoError(t, json.Unmarshal(raw, &h))
	last := h.Events[len(h.Events)-1]
	require.Equal(t, memmap.EventOutOfMemory, last.Kind)
	require.True(t, strings.HasSuffix(h.Stacks[last.Stack][0].Function, ".growKV"), "%v", h.Stacks[last.Stack][0])
	sites := map[string]bool{}
	for _, e := range h.Events {
		if e.Kind == memmap.EventAlloc {
			fn := h.Stacks[e.Stack][0].Function
			sites[fn[strings.LastIndex(fn, ".")+1:]] = true
		}
	}
	require.Equal(t, map[string]bool{"loadWeights": true, "growKV": true, "activations": true, "logits": true}, sites)
	require.Error(t, a.Close(), "the weights and the cache are still allocated: Close reports the leak")
}
