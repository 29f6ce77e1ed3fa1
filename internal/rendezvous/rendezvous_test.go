package rendezvous

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
)

var errLate = errors.New("late")

// A reader that starts first gets the whole message once it is
// published; no temporary file is left behind.
func TestPublishThenAwait(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, "msg")
	got := make(chan []byte, 1)
	go func() {
		b, err := Await(path, 1<<10, 5*time.Second, errLate)
		if err != nil {
			b = []byte(err.Error())
		}
		got <- b
	}()
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, Publish(path, []byte("hello")))
	require.Equal(t, "hello", string(<-got))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the message")
}

// A path that exists is refused, by Fresh and by Publish, and its
// contents stay.
func TestStaleFileIsRefused(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, "msg")
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	require.NoError(t, d.Fresh("msg"))
	require.NoError(t, Publish(path, []byte("first")))
	require.ErrorIs(t, d.Fresh("msg"), driver.ErrInvalidValue)
	err = Publish(path, []byte("second"))
	require.ErrorIs(t, err, driver.ErrInvalidValue)
	require.Contains(t, err.Error(), "already exists")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "first", string(b))
}

// Nothing published: the caller's sentinel, at about the timeout.
func TestAwaitTimesOut(t *testing.T) {
	start := time.Now()
	_, err := Await(filepath.Join(privateDir(t), "never"), 1<<10, 50*time.Millisecond, errLate)
	require.ErrorIs(t, err, errLate)
	require.Contains(t, err.Error(), "never")
	require.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, Publish(filepath.Join(privateDir(t), "no", "such", "dir"), nil), driver.ErrInvalidValue)
}

// A directory another user could write is refused, by name, before
// anything is read from or written to it.
func TestUntrustedDirIsRefused(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, "msg")
	require.NoError(t, os.WriteFile(path, []byte("forged"), 0o600)) // what another user would have left
	for _, mode := range []os.FileMode{0o777, 0o770, 0o755, 0o701, 0o1777} {
		require.NoError(t, os.Chmod(dir, mode))
		_, err := Await(path, 1<<10, time.Second, errLate)
		require.ErrorIs(t, err, ErrUntrustedDir, "mode %#o", mode)
		require.ErrorIs(t, err, driver.ErrInvalidValue)
		var de *DirError
		require.ErrorAs(t, err, &de)
		require.Equal(t, dir, de.Dir)
		require.Contains(t, err.Error(), dir)
		err = Publish(filepath.Join(dir, "mine"), []byte("x"))
		require.ErrorIs(t, err, ErrUntrustedDir, "mode %#o", mode)
		_, serr := os.Lstat(filepath.Join(dir, "mine"))
		require.ErrorIs(t, serr, os.ErrNotExist, "nothing written")
	}
	require.NoError(t, os.Chmod(dir, 0o700))
	b, err := Await(path, 1<<10, time.Second, errLate)
	require.NoError(t, err)
	require.Equal(t, "forged", string(b), "a private directory is trusted")
	require.ErrorIs(t, CheckDir(path), ErrUntrustedDir, "not a directory")
	require.ErrorIs(t, CheckDir(filepath.Join(dir, "none")), ErrUntrustedDir)
}

// What a reader takes is a regular file of at most max bytes: a FIFO does
// not block it past its timeout, a link is not followed (to /dev/zero: it
// would read until memory ran out), and a large file is refused unread.
func TestAwaitTakesOnlyRegularFilesOfBoundedSize(t *testing.T) {
	dir := privateDir(t)
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	done := make(chan error, 1)
	go func() { _, err := Await(fifo, 1<<10, 100*time.Millisecond, errLate); done <- err }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, driver.ErrInvalidValue)
		require.Contains(t, err.Error(), "not a regular file")
	case <-time.After(time.Minute):
		// unblock the reader so the test binary can exit
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		t.Fatal("Await blocked on a FIFO")
	}

	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink("/dev/zero", link))
	_, err := Await(link, 1<<10, time.Second, errLate)
	require.ErrorIs(t, err, driver.ErrInvalidValue)
	require.Contains(t, err.Error(), "symbolic link")

	big := filepath.Join(dir, "big")
	require.NoError(t, os.WriteFile(big, make([]byte, 1025), 0o600))
	_, err = Await(big, 1<<10, time.Second, errLate)
	require.ErrorIs(t, err, driver.ErrInvalidValue)
	require.Contains(t, err.Error(), "1025 B")
	exact := filepath.Join(dir, "exact")
	require.NoError(t, os.WriteFile(exact, make([]byte, 1024), 0o600))
	b, err := Await(exact, 1<<10, time.Second, errLate)
	require.NoError(t, err)
	require.Len(t, b, 1024)
}

// privateDir is a fresh directory only this user can use (t.TempDir's is
// mode 0755).
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	return dir
}
