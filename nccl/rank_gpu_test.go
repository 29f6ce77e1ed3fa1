package nccl_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/nccl"
)

// On a GPU with NCCL: a one-rank communicator made by each bootstrap
// (ncclGetUniqueId handed over in memory, a file rendezvous, the torchrun
// environment through NCCL_COMM_ID) runs a captured all-reduce replayed
// with fresh data. One GPU cannot hold two ranks (NCCL refuses a duplicate
// GPU), so the rendezvous of several ranks is checked over the stand-in
// library only. Skipped, with the reason, without a GPU or NCCL.
func TestGPUInitRank(t *testing.T) {
	l, d, a := onGPU(t)
	t.Logf("NCCL %s from %s", nccl.VersionString(l.Version), l.Path)

	for _, way := range []struct {
		name string
		init func(t *testing.T) (*nccl.Comm, error)
	}{
		{"unique_id", func(t *testing.T) (*nccl.Comm, error) {
			id, err := l.GetUniqueID()
			if err != nil {
				return nil, err
			}
			return l.InitRank(d, 1, id, 0)
		}},
		{"file", func(t *testing.T) (*nccl.Comm, error) {
			return l.InitFromFile(d, filepath.Join(privateDir(t), "id"), 1, 0, 10*time.Second)
		}},
		{"torchrun_env", func(t *testing.T) (*nccl.Comm, error) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			port := ln.Addr().(*net.TCPAddr).Port
			require.NoError(t, ln.Close())
			t.Setenv("NCCL_COMM_ID", "")
			require.NoError(t, os.Unsetenv("NCCL_COMM_ID"))
			t.Setenv("RANK", "0")
			t.Setenv("WORLD_SIZE", "1")
			t.Setenv("MASTER_ADDR", "127.0.0.1")
			t.Setenv("MASTER_PORT", strconv.Itoa(port))
			return l.InitFromEnv(d)
		}},
	} {
		t.Run(way.name, func(t *testing.T) {
			c, err := way.init(t)
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Destroy()) }()
			require.Equal(t, 0, c.Rank())
			require.Equal(t, 1, c.Ranks())
			allReduceReplays(t, a, c)
		})
	}
}

// allReduceReplays captures upload, all-reduce and download once and
// replays them with fresh inputs: one rank's sum is its input.
func allReduceReplays(t *testing.T, a *alloc.Allocator, c *nccl.Comm) {
	t.Helper()
	const count = 1 << 12
	o := newOperands(t, a, 4*count)
	roundTrip(t, a, o, 3, func(i, k int) byte { return byte(i*3 + k*29) }, func() error {
		return c.AllReduce(a, o.send, o.recv, count, nccl.Int32, nccl.Sum)
	})
}

// On a GPU with NCCL 2.27 or later: a one-rank symmetric window, an
// all-reduce on it captured between a copy in and a copy out, replayed
// with fresh data. Skipped, with the reason, without a GPU or windows.
func TestGPUWindow(t *testing.T) {
	l, d, a := onGPU(t)
	if !l.HasWindows() {
		t.Skipf("NCCL %s has no symmetric windows (2.27)", nccl.VersionString(l.Version))
	}
	id, err := l.GetUniqueID()
	require.NoError(t, err)
	c, err := l.InitRank(d, 1, id, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Destroy()) }()
	const count = 1 << 12
	const n = 4 * count
	w, err := c.NewWindow(d, 2*n)
	require.NoError(t, err)
	defer func() { require.NoError(t, w.Close(d)) }()
	in, out := pinned(t, a, n), pinned(t, a, n)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		if err := a.Enqueue("copy in", nil, func(s driver.Stream) error { return d.CopyHtoDAsync(w.Ptr(), in.Bytes(), s) }); err != nil {
			return err
		}
		if err := c.AllReduceWindow(a, w, 0, n, count, nccl.Int32, nccl.Sum); err != nil {
			return err
		}
		return a.Enqueue("copy out", nil, func(s driver.Stream) error { return d.CopyDtoHAsync(out.Bytes(), w.Ptr()+n, s) })
	})
	require.NoError(t, err)
	replayed(t, g, in, out, 3, func(i, k int) byte { return byte(i*5 + k*17) }, a.Synchronize)
}

// On a GPU with NCCL 2.17 or later: a one-rank nonblocking communicator
// made through ncclCommInitRankConfig with MaxCTAs set (its init polled to
// completion), an all-reduce made at once and waited for with Comm.Wait,
// then captured and replayed with fresh data; with ncclCommSplit (2.18), a
// split of it configured the same way does the same. Skipped, with the
// reason, without a GPU, NCCL, or NCCL 2.17.
func TestGPUInitRankConfigNonblocking(t *testing.T) {
	l, d, a := onGPU(t)
	if !l.HasConfig() || l.Version < 21700 {
		t.Skipf("NCCL %s has no ncclConfig_t with maxCTAs (2.17)", nccl.VersionString(l.Version))
	}
	id, err := l.GetUniqueID()
	require.NoError(t, err)
	cfg := nccl.Config{Blocking: nccl.Nonblocking, MinCTAs: 1, MaxCTAs: 2, Timeout: time.Minute}
	c, err := l.InitRankConfig(d, 1, id, 0, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Destroy()) }()
	comms := map[string]*nccl.Comm{"init": c}
	if l.HasSplit() {
		s, err := c.SplitConfig(0, 0, cfg)
		require.NoError(t, err)
		require.Equal(t, 1, s.Ranks())
		defer func() { require.NoError(t, s.Destroy()) }()
		comms["split"] = s
	}
	const count = 1 << 12
	for name, c := range comms {
		t.Run(name, func(t *testing.T) {
			o := newOperands(t, a, 4*count)
			for i := range o.in.Bytes() {
				o.in.Bytes()[i] = byte(i*11 + 3)
			}
			require.NoError(t, a.UploadHost(o.send, 0, o.in, 0, 4*count))
			require.NoError(t, a.Memset(o.recv, 0, 0, 4*count))
			require.NoError(t, c.AllReduce(a, o.send, o.recv, count, nccl.Int32, nccl.Sum))
			require.NoError(t, a.DownloadHost(o.out, 0, o.recv, 0, 4*count))
			require.NoError(t, c.Wait(a))
			require.Equal(t, o.in.Bytes(), o.out.Bytes(), "one rank's sum is its input")
			roundTripWait(t, a, o, 3, func(i, k int) byte { return byte(i*3 + k*31) }, func() error {
				return c.AllReduce(a, o.send, o.recv, count, nccl.Int32, nccl.Sum)
			}, func() error { return c.Wait(a) })
		})
	}
}
