package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin"
	"github.com/capalloc/capalloc/internal/histtest"
)

func TestMain(m *testing.M) {
	plugin.ServeIfChild()
	os.Exit(m.Run())
}

// A history written at an out-of-memory error in the field, replayed on
// the cpu backend with the device's size as its memory limit, reproduces
// the error; on a larger device it does not, and the replay says so.
func TestReplayReproducesTheOutOfMemory(t *testing.T) {
	file := histtest.WriteOOMHistory(t)
	var out, errb bytes.Buffer
	code := run([]string{"-backend=" + histtest.Backend, file}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	text := out.String()
	require.Contains(t, text, `replayed the history of allocator "field-engine" (backend "cpu"`)
	require.Contains(t, text, "allocations 8, frees 4")
	require.Contains(t, text, "recorded: peak in use 8.00 MiB, peak reserved 8.00 MiB")
	require.Contains(t, text, "replayed: peak in use 8.00 MiB, peak reserved 8.00 MiB, fragmentation (peak reserved / peak in use) 1.00")
	require.Contains(t, text, "out-of-memory errors reproduced: 1 of 1 recorded")
	require.Regexp(t, `event \d+, 2.00 MiB: reproduced: .*out of device memory: tried to allocate 2.00 MiB`, text)

	out.Reset()
	code = run([]string{"-backend=cpu:memory_limit=64MiB", file}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "out-of-memory errors reproduced: 0 of 1 recorded")
	require.Contains(t, out.String(), "2.00 MiB: not reproduced: the replay had room")

	out.Reset()
	code = run([]string{"-backend=" + histtest.Backend, "-expandable", file}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Contains(t, out.String(), "on cpu:memory_limit=8MiB, expandable segments")
}

// A file that is not a history is refused with the reader's reason, and
// nothing is replayed.
func TestReplayRefusesABadFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"events":[{"seq":0,"kind":"alloc","size":-5,"stack":-1}]}`), 0o644))
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{bad}, &out, &errb))
	require.Contains(t, errb.String(), "memmap: invalid history")
	require.Empty(t, out.String())
	require.Equal(t, 2, run(nil, &out, &errb), "no file")
}

// replayed runs allocreplay with args, wants it to succeed and returns
// what it printed.
func replayed(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, 0, run(args, &out, &errb), errb.String())
	return out.String()
}

// replayFile replays the histories in file on backend as run does,
// returning the results.
func replayFile(t *testing.T, file, backend string, eager bool) []result {
	t.Helper()
	hs, err := memmap.ReadHistoryFile(file, memmap.DefaultHistoryLimits)
	require.NoError(t, err)
	opened, err := backends.OpenString(context.Background(), backend)
	require.NoError(t, err)
	defer opened.Driver.Close()
	var rs []result
	for _, h := range hs {
		r, err := replay(h, opened.Driver, alloc.Options{}, eager)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	return rs
}

// A history of an engine that captures its step (two captures sharing a
// graph pool, a capture of its own memory, one closed), with a workspace
// and an AllocSync buffer, replays as the engine made it: the captures
// are captures on the replay's allocator, the pool is shared, the graphs
// hold their memory until their close, the workspace and the AllocSync
// buffer are made by their calls. It reproduces the out-of-memory error
// and both recorded peaks to the byte (tolerance 0: the same backend, the
// same allocator options, the same calls in the same order on a
// deterministic pool give the same segments). Replayed eagerly, as
// allocreplay did before histories said what each allocation was, the
// graph pool's and the graphs' memory is the cache's again after their
// frees: the replay has room the engine did not, and neither the error
// nor the peaks are reproduced.
func TestReplayMakesCapturesAsTheEngineDid(t *testing.T) {
	file := histtest.WriteGraphOOMHistory(t)
	text := replayed(t, "-backend="+histtest.GraphBackend, file)
	require.Contains(t, text, "as made: captures 4 (graph pools 1), workspace allocations 1, AllocSync allocations 1")
	require.NotContains(t, text, "fallback")
	require.Contains(t, text, "out-of-memory errors reproduced: 1 of 1 recorded")
	require.NotContains(t, text, "the history does not have")

	r := replayFile(t, file, histtest.GraphBackend, false)[0]
	require.Equal(t, r.recordedInUse, r.peakInUse, "peak in use")
	require.Equal(t, r.recordedReserv, r.peakReserved, "peak reserved")
	require.Equal(t, 1, r.reproduced())

	eager := replayFile(t, file, histtest.GraphBackend, true)[0]
	require.Zero(t, eager.reproduced(), "the eager replay has room the engine did not")
	require.NotEqual(t, [2]int64{eager.recordedInUse, eager.recordedReserv}, [2]int64{eager.peakInUse, eager.peakReserved})
	text = replayed(t, "-backend="+histtest.GraphBackend, "-eager", file)
	require.Contains(t, text, "every allocation an eager Alloc (-eager)")
	require.Contains(t, text, "out-of-memory errors reproduced: 0 of 1 recorded")
}

// rewrite rewrites the history in file with edit, as JSON objects, into
// a new file.
func rewrite(t *testing.T, file string, edit func(h map[string]any)) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var h map[string]any
	require.NoError(t, json.Unmarshal(data, &h))
	edit(h)
	data, err = json.Marshal(h)
	require.NoError(t, err)
	name := filepath.Join(t.TempDir(), "edited.json")
	require.NoError(t, os.WriteFile(name, data, 0o644))
	return name
}

// A history written before histories said what each allocation was (no
// format, no via, graph, pool or pool-close) is replayed eagerly, and the
// output says so, with the count.
func TestReplayOldHistoryFallsBackToEager(t *testing.T) {
	old := rewrite(t, histtest.WriteGraphOOMHistory(t), func(h map[string]any) {
		delete(h, "format")
		var evs []any
		for _, e := range h["events"].([]any) {
			e := e.(map[string]any)
			if e["kind"] == string(memmap.EventPoolClose) {
				continue
			}
			for _, k := range []string{"via", "workspace", "graph", "pool"} {
				delete(e, k)
			}
			evs = append(evs, e)
		}
		h["events"] = evs
	})
	text := replayed(t, "-backend="+histtest.GraphBackend, old)
	require.Regexp(t, `\n  fallback: 24 allocations replayed as eager Alloc: the history is older than format 2 and does not say which were made in captures, into graph pools, as workspaces or by AllocSync\n`, text)
	require.NotContains(t, text, "as made")
	require.Contains(t, text, "out-of-memory errors reproduced: 0 of 1 recorded", "eager, as before")
}

// A history whose oldest event kept is inside a capture (the ring dropped
// its begin) replays that capture's allocations eagerly and says how
// many; the captures after it are replayed as made.
func TestReplayCaptureBeganBeforeTheHistory(t *testing.T) {
	cut := rewrite(t, histtest.WriteGraphOOMHistory(t), func(h map[string]any) {
		evs := h["events"].([]any)
		for i, e := range evs {
			if e.(map[string]any)["kind"] == string(memmap.EventCaptureBegin) {
				h["events"] = evs[i+1:] // from the first capture's first allocation on
				return
			}
		}
		t.Fatal("no capture in the history")
	})
	text := replayed(t, "-backend="+histtest.GraphBackend, cut)
	require.Contains(t, text, "\n  fallback: 2 graph-owned allocations replayed as eager Alloc: their capture is not replayed")
	require.Contains(t, text, "as made: captures 3 (graph pools 1)")
}

// A history whose new fields are out of range is refused with the
// reader's typed error, and nothing is replayed.
func TestReplayRefusesBadOwners(t *testing.T) {
	bad := rewrite(t, histtest.WriteGraphOOMHistory(t), func(h map[string]any) {
		for _, e := range h["events"].([]any) {
			if e := e.(map[string]any); e["via"] == string(memmap.ViaAllocSync) {
				e["via"] = "mmap"
			}
		}
	})
	var out, errb bytes.Buffer
	require.Equal(t, 1, run([]string{bad}, &out, &errb))
	require.Contains(t, errb.String(), `memmap: invalid history: event 3 (seq 3): via "mmap"`)
	require.Empty(t, out.String())
}

// An out-of-memory error inside a capture (the history written there,
// mid-capture) is retried inside the replayed capture, where it
// happened: the error says so.
func TestReplayRetriesInTheCapture(t *testing.T) {
	a, file := histtest.Recording(t, 8<<20, "engine")
	b, err := a.Alloc(4 << 20)
	require.NoError(t, err)
	_, err = a.WithCapture(alloc.CaptureOptions{}, func() error {
		if _, err := a.Alloc(2 << 20); err != nil {
			return err
		}
		_, err := a.Alloc(3 << 20)
		return err
	})
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, a.Free(b))
	require.NoError(t, a.Close())

	text := replayed(t, "-backend=cpu:memory_limit=8MiB", file)
	require.Contains(t, text, "as made: captures 1 (graph pools 0)")
	require.Regexp(t, `event \d+, 3.00 MiB: reproduced: capalloc cpu: Alloc \[capture=active\]: out of device memory`, text)
}

// An AllocSync that failed is retried as AllocSync: on a full device
// whose pool caches 1 MiB pieces, an Alloc of 1 MiB has room, an
// AllocSync (driver memory) has none, and the replay reproduces it.
func TestReplayRetriesThroughTheCallThatFailed(t *testing.T) {
	a, file := histtest.Recording(t, 8<<20, "engine")
	var bs []alloc.Buffer
	for range 8 { // four 2 MiB segments, the device full
		b, err := a.Alloc(1 << 20)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for i, b := range bs {
		if i%2 == 0 { // 1 MiB free in each segment: none wholly free
			require.NoError(t, a.Free(b))
		}
	}
	_, err := a.AllocSync(1 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	for i, b := range bs {
		if i%2 == 1 {
			require.NoError(t, a.Free(b))
		}
	}
	require.NoError(t, a.Close())

	text := replayed(t, "-backend=cpu:memory_limit=8MiB", file)
	require.Regexp(t, `event \d+, 1.00 MiB: reproduced: capalloc cpu: AllocSync `, text)
}

// Captures the replay cannot make as recorded are made as near as it can
// and said: a mode it does not know is begun as global, and a capture
// the history says failed, which the replay's did not, gives its graph
// back at once; the replay goes on.
func TestReplaySaysWhereCapturesDiffer(t *testing.T) {
	edited := rewrite(t, histtest.WriteGraphOOMHistory(t), func(h map[string]any) {
		begins, ends := 0, 0
		for _, e := range h["events"].([]any) {
			switch e := e.(map[string]any); e["kind"] {
			case string(memmap.EventCaptureBegin):
				if begins++; begins == 1 {
					e["detail"] = "sideways"
				}
			case string(memmap.EventCaptureEnd):
				if ends++; ends == 3 {
					e["detail"] = "failed: as the history says"
				}
			}
		}
	})
	text := replayed(t, "-backend="+histtest.GraphBackend, edited)
	require.Contains(t, text, "\n  fallback: 1 captures of an unknown mode begun as global\n")
	require.Contains(t, text, "\n  fallback: 1 captures that failed in the history or in the replay but not both (the graph released at once)\n")
	require.Contains(t, text, "as made: captures 4 (graph pools 1)")
}
