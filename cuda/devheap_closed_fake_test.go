package cuda

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// devHeapClosedEnv makes the test binary a rank of
// TestFakeDeviceHeapPeerClosedAcrossProcesses: "rank,dir".
const devHeapClosedEnv = "CAPALLOC_TEST_DEVHEAP_CLOSED_RANK"

// Two processes over the fake (the heaps really IPC-mapped): after a
// barrier, rank 1 closes alone. Its release round times out
// (ErrExchangeTimeout) and, since rank 0 still maps its heap (freeing it
// would be undefined, per the runtimes' docs), its memory stays allocated
// and its allocator's Close reports it. Rank 0's next barrier fails with
// ErrPeerClosed and writes nothing into rank 1's memory: rank 1 reads its
// pad, through the address it kept, before and after rank 0's barrier.
// Rank 0's Close then finds rank 1's release in the file exchange and
// frees its heap (docs/reliability.md, round 4, item 6).
func TestFakeDeviceHeapPeerClosedAcrossProcesses(t *testing.T) {
	if asRank(t, devHeapClosedEnv, devHeapClosedChild) {
		return
	}
	fake.Lib(t)
	runRanks(t, "TestFakeDeviceHeapPeerClosedAcrossProcesses", devHeapClosedEnv, 2, func(r int, dir string) string {
		return strconv.Itoa(r) + "," + dir
	})
}

// awaitFile waits for path to exist (the other rank's signal).
func awaitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "no %s after 30 s", filepath.Base(path))
		time.Sleep(10 * time.Millisecond)
	}
}

func devHeapClosedChild(t *testing.T, spec string) {
	f := strings.SplitN(spec, ",", 2)
	rank, _ := strconv.Atoi(f[0])
	dir := f[1]
	signals := map[int][]string{0: {"synced", "done"}, 1: {"closed", "read"}}[rank]
	t.Cleanup(func() { // a rank that failed early must not leave its peer waiting
		for _, s := range signals {
			_ = os.WriteFile(filepath.Join(dir, s), nil, 0o600)
		}
	})
	d, err := New(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	const timeout = 2 * time.Second
	h, err := symheap.OpenDevice(rank, a, symheap.FileExchange(dir, 2), devHeapSize, symheap.DeviceOptions{Timeout: timeout})
	require.NoError(t, err)
	require.NoError(t, h.Barrier())
	require.NoError(t, h.Synchronize())

	if rank == 1 {
		// Wait until rank 0 passed the barrier too (it may still read this
		// pad), then close alone.
		awaitFile(t, filepath.Join(dir, "synced"))
		pad := h.Buffer().Ptr()
		require.ErrorIs(t, h.Close(), symheap.ErrExchangeTimeout, "rank 0 does not join the release round")
		s, err := d.CreateStream()
		require.NoError(t, err)
		before := make([]byte, symheap.SignalPadBytes)
		require.NoError(t, d.CopyDtoH(before, pad, s), "the memory is kept: rank 0 still maps it")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "closed"), nil, 0o600))
		awaitFile(t, filepath.Join(dir, "done"))
		after := make([]byte, symheap.SignalPadBytes)
		require.NoError(t, d.CopyDtoH(after, pad, s))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "read"), nil, 0o600))
		if !bytes.Equal(before, after) {
			i := 0
			for before[i] == after[i] {
				i++
			}
			t.Fatalf("rank 0's barrier wrote into the pad of a rank that had closed (byte %d: %#x, was %#x)", i, after[i], before[i])
		}
		require.NoError(t, d.DestroyStream(s))
		require.ErrorIs(t, a.Close(), alloc.ErrLeaked, "the kept heap is reported")
		return
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "synced"), nil, 0o600))
	awaitFile(t, filepath.Join(dir, "closed"))
	err = h.Barrier()
	if err == nil {
		err = h.Synchronize()
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "done"), nil, 0o600))
	require.ErrorIs(t, err, symheap.ErrPeerClosed)
	require.Contains(t, err.Error(), "rank 1 closed its heap")
	awaitFile(t, filepath.Join(dir, "read")) // this Close marks rank 1's pad too
	// Rank 1 published its release (after unmapping this heap) in the
	// round this Close enters: the file exchange keeps it, so the round
	// completes and this heap is freed.
	require.NoError(t, h.Close())
	require.NoError(t, a.Close())
}
