//go:build unix

package alloc_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// newWithHistoryFile is New on a fresh cpu driver with a history and
// HistoryFile path; the allocator, when New succeeds, is closed when the
// test ends.
func newWithHistoryFile(t *testing.T, path string) (*alloc.Allocator, error) {
	t.Helper()
	d := newCPU(t, 64<<20)
	a, err := alloc.New(d, alloc.Options{History: 100, HistoryFile: path})
	if err == nil {
		t.Cleanup(func() { a.Close() })
	}
	return a, err
}

// requireRefused checks that err is New's refusal of a history file for
// why.
func requireRefused(t *testing.T, err error, why string) {
	t.Helper()
	require.ErrorIs(t, err, alloc.ErrHistoryFileRefused)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), why)
}

// requireFIFO checks that path is still a FIFO.
func requireFIFO(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeNamedPipe, "%s is %v, no longer a FIFO", path, fi.Mode())
}

// A history file that is not a regular file (a FIFO, a symlink, a
// directory) is never replaced: New refuses it with
// ErrHistoryFileRefused; one that becomes so after New is refused at the
// write, which is logged and counted (the history's File) and leaves it
// as it was, with no temporary file beside it.
func TestHistoryFileNeverReplacesANonRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	victim := filepath.Join(dir, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("not yours"), 0o600))
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(victim, link))
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.Mkdir(sub, 0o700))

	for _, tc := range []struct{ path, why string }{{fifo, "not a regular file (a FIFO)"}, {link, "not a regular file (a symlink)"}, {sub, "not a regular file (a directory)"}} {
		_, err := newWithHistoryFile(t, tc.path)
		requireRefused(t, err, tc.why)
	}
	requireFIFO(t, fifo)
	target, err := os.Readlink(link)
	require.NoError(t, err)
	require.Equal(t, victim, target)

	path := filepath.Join(dir, "history.json")
	a, err := newWithHistoryFile(t, path)
	require.NoError(t, err)
	require.NoError(t, os.Symlink(victim, path))
	_, err = a.Alloc(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	err = alloc.FlushHistoryFiles()
	require.ErrorIs(t, err, alloc.ErrHistoryFileRefused)
	raw, err := os.ReadFile(victim)
	require.NoError(t, err)
	require.Equal(t, "not yours", string(raw))
	st := readHistory(t, a).File
	require.EqualValues(t, 0, st.Written)
	require.EqualValues(t, 1, st.Failed)
	require.Contains(t, st.Error, "a symlink")

	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, err = a.Alloc(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.ErrorIs(t, alloc.FlushHistoryFiles(), alloc.ErrHistoryFileRefused, "refused without opening the FIFO (which would block)")
	requireFIFO(t, path)

	require.NoError(t, os.Remove(path))
	_, err = a.Alloc(1 << 40)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.NoError(t, alloc.FlushHistoryFiles())
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular())
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	st = readHistory(t, a).File
	require.EqualValues(t, 1, st.Written)
	require.EqualValues(t, 2, st.Failed)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 5, "fifo, victim, link, sub, history.json, nothing else: %v", entries)
}

// The history file's directory is checked, as opened: New refuses a
// directory that is a symlink (another user's, in a shared sticky
// directory, would receive the file), one others may write to without the
// sticky bit, and another user's; a sticky one others may write to (as
// /tmp) is accepted. A symlink above the directory is followed.
func TestHistoryFileDirectoryIsChecked(t *testing.T) {
	shared := t.TempDir()
	theirs := filepath.Join(shared, "theirs")
	require.NoError(t, os.Mkdir(theirs, 0o700))
	link := filepath.Join(shared, "link")
	require.NoError(t, os.Symlink(theirs, link))
	_, err := newWithHistoryFile(t, filepath.Join(link, "history.json"))
	requireRefused(t, err, "is a symlink")

	for _, tc := range []struct {
		mode os.FileMode
		why  string
	}{{0o777, "is writable by others and not sticky"}, {0o770, "is writable by others and not sticky"}, {os.ModeSticky | 0o777, ""}, {0o755, ""}} {
		dir := filepath.Join(shared, "mode-"+tc.mode.String())
		require.NoError(t, os.Mkdir(dir, 0o700))
		require.NoError(t, os.Chmod(dir, tc.mode))
		a, err := newWithHistoryFile(t, filepath.Join(dir, "history.json"))
		if tc.why != "" {
			requireRefused(t, err, tc.why)
			continue
		}
		require.NoError(t, err, "mode %v", tc.mode)
		_, err = a.Alloc(1 << 40)
		require.ErrorIs(t, err, alloc.ErrOutOfMemory)
		require.NoError(t, alloc.FlushHistoryFiles())
		readHistoryFile(t, filepath.Join(dir, "history.json"))
	}

	real := filepath.Join(shared, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "logs"), 0o700))
	above := filepath.Join(shared, "above")
	require.NoError(t, os.Symlink(real, above))
	_, err = newWithHistoryFile(t, filepath.Join(above, "logs", "history.json"))
	require.NoError(t, err, "a symlink above the directory is followed")

	t.Run("another user's", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("making a directory another user's needs root")
		}
		other := filepath.Join(shared, "other")
		require.NoError(t, os.Mkdir(other, 0o755))
		require.NoError(t, os.Chown(other, 4242, 4242))
		_, err := newWithHistoryFile(t, filepath.Join(other, "history.json"))
		requireRefused(t, err, "belongs to another user")
	})
}
