package nccl_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/nccl"
)

// On a GPU with NCCL: a one-rank communicator made by each bootstrap
// (ncclGetUniqueId handed over in memory, a file rendezvous, the torchrun
// environment through NCCL_COMM_ID) runs a captured all-reduce replayed
// with fresh data. One GPU cannot hold two ranks (NCCL refuses a duplicate
// GPU), so the rendezvous of several ranks is checked over the stand-in
// library only. Skipped, with the reason, without a GPU or NCCL.
func TestGPUInitRank(t *testing.T) {
	l, err := nccl.Load()
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	d, err := cuda.New(cuda.Options{})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
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
	const n = 4 * count
	in, err := a.HostAlloc(n)
	require.NoError(t, err)
	defer in.Close()
	out, err := a.HostAlloc(n)
	require.NoError(t, err)
	defer out.Close()
	send, err := a.Alloc(n)
	require.NoError(t, err)
	defer a.Free(send)
	recv, err := a.Alloc(n)
	require.NoError(t, err)
	defer a.Free(recv)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		if err := a.UploadHost(send, 0, in, 0, n); err != nil {
			return err
		}
		if err := a.Memset(recv, 0, 0, n); err != nil {
			return err
		}
		if err := c.AllReduce(a, send, recv, count, nccl.Int32, nccl.Sum); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, recv, 0, n)
	})
	require.NoError(t, err)
	defer g.Close()
	for k := range 3 {
		for i := range in.Bytes() {
			in.Bytes()[i] = byte(i*3 + k*29)
		}
		require.NoError(t, g.Launch())
		require.NoError(t, a.Synchronize())
		require.True(t, bytes.Equal(in.Bytes(), out.Bytes()), "replay %d", k)
	}
}

// On a GPU with NCCL 2.27 or later: a one-rank symmetric window, an
// all-reduce on it captured between a copy in and a copy out, replayed
// with fresh data. Skipped, with the reason, without a GPU or windows.
func TestGPUWindow(t *testing.T) {
	l, err := nccl.Load()
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	if !l.HasWindows() {
		t.Skipf("NCCL %s has no symmetric windows (2.27)", nccl.VersionString(l.Version))
	}
	d, err := cuda.New(cuda.Options{})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
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
	in, err := a.HostAlloc(n)
	require.NoError(t, err)
	defer in.Close()
	out, err := a.HostAlloc(n)
	require.NoError(t, err)
	defer out.Close()
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
	defer g.Close()
	for k := range 3 {
		for i := range in.Bytes() {
			in.Bytes()[i] = byte(i*5 + k*17)
		}
		require.NoError(t, g.Launch())
		require.NoError(t, a.Synchronize())
		require.True(t, bytes.Equal(in.Bytes(), out.Bytes()), "replay %d", k)
	}
}
