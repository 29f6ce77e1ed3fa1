package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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
