package symheap_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// allGather runs one round on every rank, each in its own goroutine.
func allGather(x symheap.Exchange, msg func(r int) []byte, timeout time.Duration) ([][][]byte, []error) {
	out := make([][][]byte, x.Ranks())
	errs := make([]error, x.Ranks())
	var wg sync.WaitGroup
	for r := range x.Ranks() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r], errs[r] = x.AllGather(r, msg(r), timeout)
		}()
	}
	wg.Wait()
	return out, errs
}

// Both exchanges: every rank gets every rank's message of the same round,
// in rank order, round after round; a missing rank is ErrExchangeTimeout
// naming it; a rank outside the exchange is refused.
func TestExchanges(t *testing.T) {
	for name, mk := range map[string]func(t *testing.T, ranks int) symheap.Exchange{
		"local": func(t *testing.T, ranks int) symheap.Exchange { return symheap.NewLocalExchange(ranks) },
		"file":  func(t *testing.T, ranks int) symheap.Exchange { return symheap.FileExchange(privateDir(t), ranks) },
	} {
		t.Run(name, func(t *testing.T) {
			x := mk(t, 3)
			for round := range 3 {
				got, errs := allGather(x, func(r int) []byte { return fmt.Appendf(nil, "round %d rank %d", round, r) }, 5*time.Second)
				for r := range 3 {
					require.NoError(t, errs[r])
					for p := range 3 {
						require.Equal(t, fmt.Sprintf("round %d rank %d", round, p), string(got[r][p]))
					}
				}
			}
			_, err := x.AllGather(3, nil, time.Second)
			require.ErrorIs(t, err, alloc.ErrInvalidValue)

			x = mk(t, 3)
			start := time.Now()
			_, err = x.AllGather(1, []byte("alone"), 50*time.Millisecond)
			require.ErrorIs(t, err, symheap.ErrExchangeTimeout)
			require.Contains(t, err.Error(), "rank(s) [0 2]")
			require.Less(t, time.Since(start), 2*time.Second)
		})
	}
}

// A file exchange refuses a directory left by an earlier run.
func TestFileExchangeRefusesStaleFiles(t *testing.T) {
	dir := privateDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "round-0-rank-0"), []byte("old"), 0o600))
	_, err := symheap.FileExchange(dir, 1).AllGather(0, []byte("new"), time.Second)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "already exists")
}

// privateDir is a fresh directory only this user can use (t.TempDir's is
// mode 0755), as FileExchange requires.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	return dir
}

// A directory another user could write is refused before anything is read
// from it: a pre-written round-0-rank-1 there is not taken as rank 1's
// message.
func TestFileExchangeRefusesSharedDir(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "round-0-rank-1"), []byte("forged"), 0o666))
	got, err := symheap.FileExchange(dir, 2).AllGather(0, []byte("mine"), time.Second)
	require.ErrorIs(t, err, symheap.ErrUntrustedDir)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), dir)
	require.Nil(t, got)
}

// The exchange reads the directory it checked. While rank 0 waits for
// rank 1, the owner of the directory's parent renames it away and puts a
// directory open to everyone at its path, with a forged rank-1 message:
// rank 0 does not take it, and gets rank 1's real message, published in
// the directory rank 0 checked.
func TestFileExchangeKeepsTheDirectoryItChecked(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("files are reached through the directory's descriptor on linux only (internal/rendezvous/dir_other.go)")
	}
	dir := filepath.Join(t.TempDir(), "x")
	require.NoError(t, os.Mkdir(dir, 0o700))
	type result struct {
		got [][]byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := symheap.FileExchange(dir, 2).AllGather(0, []byte("rank 0"), 10*time.Second)
		done <- result{got, err}
	}()
	require.Eventually(t, func() bool {
		_, err := os.Lstat(filepath.Join(dir, "round-0-rank-0"))
		return err == nil
	}, 10*time.Second, time.Millisecond, "rank 0 checked the directory and published")

	checked := dir + ".checked"
	require.NoError(t, os.Rename(dir, checked))
	require.NoError(t, os.Mkdir(dir, 0o777))
	require.NoError(t, os.Chmod(dir, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "round-0-rank-1"), []byte("forged"), 0o666))

	_, err := symheap.FileExchange(dir, 2).AllGather(1, []byte("rank 1"), time.Second)
	require.ErrorIs(t, err, symheap.ErrUntrustedDir, "a rank arriving now is refused the swapped-in directory")
	got, err := symheap.FileExchange(checked, 2).AllGather(1, []byte("rank 1"), 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("rank 0"), []byte("rank 1")}, got)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, [][]byte{[]byte("rank 0"), []byte("rank 1")}, r.got, "rank 0 took the forged file")
}

// A message file larger than MaxExchangeMessage is refused, and so is a
// message too large to publish.
func TestFileExchangeBoundsMessages(t *testing.T) {
	dir := privateDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "round-0-rank-1"), make([]byte, symheap.MaxExchangeMessage+1), 0o600))
	_, err := symheap.FileExchange(dir, 2).AllGather(0, []byte("mine"), time.Second)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	_, err = symheap.FileExchange(privateDir(t), 1).AllGather(0, make([]byte, symheap.MaxExchangeMessage+1), time.Second)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
}

// An authenticated exchange delivers what the ranks sent, and refuses a
// message without a valid tag under the job's key: one pre-written by
// someone who can write the directory, or one sent under another key.
func TestAuthenticatedExchange(t *testing.T) {
	key := []byte("0123456789abcdef-job-secret")
	auth := func(x symheap.Exchange, key []byte) symheap.Exchange {
		a, err := symheap.AuthenticatedExchange(x, key)
		require.NoError(t, err)
		return a
	}
	dir := privateDir(t)
	x := auth(symheap.FileExchange(dir, 2), key)
	got, errs := allGather(x, func(r int) []byte { return fmt.Appendf(nil, "rank %d", r) }, 5*time.Second)
	for r := range 2 {
		require.NoError(t, errs[r])
		require.Equal(t, [][]byte{[]byte("rank 0"), []byte("rank 1")}, got[r])
	}

	// Round 1 (the file exchange's round 2, after the opening round and
	// round 0): rank 1's message was written by someone without the key.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "round-2-rank-1"), []byte("a forged message, long enough to hold a tag......"), 0o600))
	_, err := x.AllGather(0, []byte("mine"), 5*time.Second)
	require.ErrorIs(t, err, symheap.ErrUnauthenticated)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	require.Contains(t, err.Error(), "rank 1's message in round 1")

	// Ranks with different keys (another job's) refuse each other.
	inner := symheap.FileExchange(privateDir(t), 2)
	keys := [][]byte{key, []byte("another-job-key-0123456789")}
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = auth(inner, keys[r]).AllGather(r, []byte("hello"), 5*time.Second)
		}()
	}
	wg.Wait()
	require.ErrorIs(t, errs[0], symheap.ErrUnauthenticated)
	require.Contains(t, errs[0].Error(), "rank 1's message")
	require.ErrorIs(t, errs[1], symheap.ErrUnauthenticated)
	require.Contains(t, errs[1].Error(), "rank 0's message")

	_, err = symheap.AuthenticatedExchange(symheap.NewLocalExchange(1), []byte("short"))
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
}

// One key, two exchanges (two heaps in a job, or a job restarted with the
// same key): rank 1's messages from exchange A, copied into exchange B's
// directory by whoever can write it, are not accepted in B, while two
// exchanges under one key work side by side.
func TestAuthenticatedExchangeNamesTheExchange(t *testing.T) {
	key := []byte("0123456789abcdef-job-secret")
	auth := func(x symheap.Exchange) symheap.Exchange {
		a, err := symheap.AuthenticatedExchange(x, key)
		require.NoError(t, err)
		return a
	}
	dirA, dirB := privateDir(t), privateDir(t)
	a, b := auth(symheap.FileExchange(dirA, 2)), auth(symheap.FileExchange(dirB, 2))
	for round := range 2 {
		for name, x := range map[string]symheap.Exchange{"A": a, "B": b} {
			got, errs := allGather(x, func(r int) []byte { return fmt.Appendf(nil, "%s round %d rank %d", name, round, r) }, 5*time.Second)
			for r := range 2 {
				require.NoError(t, errs[r], "exchange %s", name)
				require.Equal(t, fmt.Sprintf("%s round %d rank 1", name, round), string(got[r][1]))
			}
		}
	}

	dirC := privateDir(t)
	entries, err := os.ReadDir(dirA)
	require.NoError(t, err)
	copied := 0
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), "-rank-1") {
			m, err := os.ReadFile(filepath.Join(dirA, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dirC, e.Name()), m, 0o600))
			copied++
		}
	}
	require.NotZero(t, copied)
	c := auth(symheap.FileExchange(dirC, 2))
	got, err := c.AllGather(0, []byte("C rank 0"), 5*time.Second)
	require.ErrorIs(t, err, symheap.ErrUnauthenticated, "rank 1's message from exchange A accepted in C: %q", got)
	require.Contains(t, err.Error(), "rank 1's message in round 0")
}

// replayExchange is a medium that records what passes through it, or,
// given a recording, hands back the recorded round instead of what was
// sent: a replay of another exchange's messages.
type replayExchange struct {
	symheap.Exchange
	rounds [][][]byte
	replay [][][]byte
}

func (x *replayExchange) AllGather(rank int, msg []byte, timeout time.Duration) ([][]byte, error) {
	got, err := x.Exchange.AllGather(rank, msg, timeout)
	if k := len(x.rounds); err == nil && k < len(x.replay) {
		got = x.replay[k]
	}
	x.rounds = append(x.rounds, got)
	return got, err
}

// A rank's own nonce must come back as it sent it: a validly tagged one
// from another exchange under the same key, put in its place, is refused.
func TestAuthenticatedExchangeRefusesAReplayedOpening(t *testing.T) {
	key := []byte("0123456789abcdef-job-secret")
	rec := &replayExchange{Exchange: symheap.NewLocalExchange(1)}
	a, err := symheap.AuthenticatedExchange(rec, key)
	require.NoError(t, err)
	_, err = a.AllGather(0, []byte("A"), time.Second)
	require.NoError(t, err)
	require.Len(t, rec.rounds, 2, "the opening round, then the caller's")

	b, err := symheap.AuthenticatedExchange(&replayExchange{Exchange: symheap.NewLocalExchange(1), replay: rec.rounds}, key)
	require.NoError(t, err)
	_, err = b.AllGather(0, []byte("B"), time.Second)
	require.ErrorIs(t, err, symheap.ErrUnauthenticated)
	require.Contains(t, err.Error(), "own nonce came back changed")
}
