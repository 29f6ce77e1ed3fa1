package alloc_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// stuckLogger is a logger whose warnings about the history file block
// until release is closed; entered receives one value per such warning.
type stuckLogger struct {
	entered chan<- struct{}
	release <-chan struct{}
}

func (stuckLogger) Enabled(context.Context, slog.Level) bool { return true }
func (l stuckLogger) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l stuckLogger) WithGroup(string) slog.Handler          { return l }

func (l stuckLogger) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "allocation history") {
		select {
		case l.entered <- struct{}{}:
		default:
		}
		<-l.release
	}
	return nil
}

// within fails the test unless ch delivers within a bound (generous: it
// guards against a hang, it does not time anything).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10 s", what)
		panic("unreachable")
	}
}

// readHistoryFile reads the history in the file at path.
func readHistoryFile(t *testing.T, path string) memmap.History {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var h memmap.History
	require.NoError(t, json.Unmarshal(raw, &h))
	return h
}

// An out-of-memory error hands the history file to a writer of its own:
// while that writer is stuck (its directory gone, its warning blocked in
// the engine's logger), the error returns and the allocator serves
// allocations and frees that need its lock. Errors made meanwhile leave
// one snapshot pending, the latest, which FlushHistoryFiles waits for.
func TestOutOfMemoryDoesNotWaitForTheHistoryFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	require.NoError(t, os.Mkdir(dir, 0o700))
	path := filepath.Join(dir, "history.json")
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 1000, HistoryFile: path,
		Logger: slog.New(stuckLogger{entered, release})})
	t.Cleanup(unblock) // before the allocator's Close, which waits for the writer
	require.NoError(t, os.Remove(dir))

	failed := make(chan error, 1)
	go func() {
		_, err := a.Alloc(1 << 40)
		failed <- err
	}()
	within(t, entered, "the failed write's warning")
	served := make(chan error, 1)
	go func() { // a size not allocated before: the pool's path, under the allocator's lock
		b, err := a.Alloc(3 << 20)
		if err == nil {
			err = a.Free(b)
		}
		served <- err
	}()
	require.NoError(t, within(t, served, "an alloc and free while the history file's writer is stuck"))
	require.ErrorIs(t, within(t, failed, "the out-of-memory error while its history file is being written"), alloc.ErrOutOfMemory)

	for _, n := range []int64{1 << 41, 1 << 42} {
		_, err := a.Alloc(n)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	}
	require.NoError(t, os.Mkdir(dir, 0o700))
	unblock()
	require.NoError(t, alloc.FlushHistoryFiles(), "the latest write succeeded")
	h := readHistoryFile(t, path)
	last := h.Events[len(h.Events)-1]
	require.Equal(t, memmap.EventOutOfMemory, last.Kind)
	require.EqualValues(t, 1<<42, last.Size, "the latest error's history")
	st := readHistory(t, a).File
	require.NotNil(t, st)
	require.Equal(t, path, st.Path)
	require.EqualValues(t, 1, st.Written, "the second error's snapshot was replaced by the third's")
	require.EqualValues(t, 1, st.Failed)
	require.Contains(t, st.Error, "no such file or directory")
}

// Close waits for the history file's write in progress: the file holds
// the error's history when Close returns.
func TestCloseFlushesTheHistoryFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.json")
	a := cpuAllocatorWith(t, 64<<20, alloc.Options{History: 1 << 16, HistoryFile: path})
	for range 1000 {
		b, err := a.Alloc(64 << 10)
		require.NoError(t, err)
		require.NoError(t, a.Free(b))
	}
	_, err := a.Alloc(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, a.Close())
	h := readHistoryFile(t, path)
	require.Equal(t, memmap.EventOutOfMemory, h.Events[len(h.Events)-1].Kind)
	require.EqualValues(t, 1, readHistory(t, a).File.Written)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}
