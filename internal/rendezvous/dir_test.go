package rendezvous

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
)

// swapDir renames dir away (to dir+".checked") and puts a directory open
// to everyone at its path, holding a forged message file name: what the
// owner of dir's parent can do when the parent is not sticky. It returns
// where the checked directory now is.
func swapDir(t *testing.T, dir, name string) string {
	t.Helper()
	moved := dir + ".checked"
	require.NoError(t, os.Rename(dir, moved))
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("forged"), 0o666))
	return moved
}

// A Dir keeps the directory it checked: after another directory is
// renamed into its path, it reads, publishes and checks names in the one
// it checked, and never takes the forged file.
func TestDirSwappedAfterCheckIsNotRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("files are reached through the directory's descriptor on linux only (dir_other.go)")
	}
	dir := filepath.Join(t.TempDir(), "x")
	require.NoError(t, os.Mkdir(dir, 0o700))
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()

	moved := swapDir(t, dir, "peer")
	require.False(t, d.Exists("peer"), "the forged file is not in the directory checked")
	require.NoError(t, os.WriteFile(filepath.Join(moved, "peer"), []byte("real"), 0o600))
	b, err := d.Await("peer", 1<<10, time.Second, errLate)
	require.NoError(t, err)
	require.Equal(t, "real", string(b))

	require.NoError(t, d.Publish("mine", []byte("x")))
	_, err = os.Lstat(filepath.Join(moved, "mine"))
	require.NoError(t, err, "published in the directory checked")
	_, err = os.Lstat(filepath.Join(dir, "mine"))
	require.ErrorIs(t, err, os.ErrNotExist, "not in the one swapped in")
	entries, err := os.ReadDir(moved)
	require.NoError(t, err)
	require.Len(t, entries, 2, "no temporary file left")

	_, err = Await(filepath.Join(dir, "peer"), 1<<10, time.Second, errLate)
	require.ErrorIs(t, err, ErrUntrustedDir, "opened anew, the swapped-in directory is refused")
}

// The directory itself must be named: a symbolic link to a private
// directory is refused (its target could be swapped), and a name that is
// not one entry of the directory is an invalid value.
func TestOpenDirRefusesLinksAndPaths(t *testing.T) {
	dir := privateDir(t)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	_, err := OpenDir(link)
	require.ErrorIs(t, err, ErrUntrustedDir)
	require.Contains(t, err.Error(), "symbolic link")
	require.ErrorIs(t, CheckDir(link), ErrUntrustedDir)

	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, dir, d.Path())
	for _, name := range []string{"", ".", "..", "../x", "a/b"} {
		require.ErrorIs(t, d.Publish(name, nil), driver.ErrInvalidValue, "%q", name)
		_, err := d.Await(name, 1, time.Millisecond, errLate)
		require.ErrorIs(t, err, driver.ErrInvalidValue, "%q", name)
		require.False(t, d.Exists(name))
	}
}
