package rendezvous

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

var errLate = errors.New("late")

// A reader that starts first gets the whole message once it is
// published; no temporary file is left behind.
func TestPublishThenAwait(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "msg")
	got := make(chan []byte, 1)
	go func() {
		b, err := Await(path, 5*time.Second, errLate)
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
	path := filepath.Join(t.TempDir(), "msg")
	require.NoError(t, Fresh(path))
	require.NoError(t, Publish(path, []byte("first")))
	require.ErrorIs(t, Fresh(path), alloc.ErrInvalidValue)
	err := Publish(path, []byte("second"))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "already exists")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "first", string(b))
}

// Nothing published: the caller's sentinel, at about the timeout.
func TestAwaitTimesOut(t *testing.T) {
	start := time.Now()
	_, err := Await(filepath.Join(t.TempDir(), "never"), 50*time.Millisecond, errLate)
	require.ErrorIs(t, err, errLate)
	require.Contains(t, err.Error(), "never")
	require.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, Publish(filepath.Join(t.TempDir(), "no", "such", "dir"), nil), alloc.ErrInvalidValue)
}
