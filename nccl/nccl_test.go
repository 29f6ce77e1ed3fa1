package nccl_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/nccl"
)

func TestMissingLibraryIsExplained(t *testing.T) {
	t.Setenv(nccl.EnvLib, "/nonexistent/libnccl.so.2")
	_, err := nccl.Load()
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "/nonexistent/libnccl.so.2")
	require.Contains(t, err.Error(), "set "+nccl.EnvLib)
}

func TestNotAnNCCLLibraryIsRefused(t *testing.T) {
	t.Setenv(nccl.EnvLib, "libc.so.6")
	_, err := nccl.Load()
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "not an NCCL library (no ncclGetVersion)")
}

// Without CAPALLOC_NCCL_LIB the search either finds a capturable NCCL or
// says what it tried; it never panics.
func TestDefaultSearch(t *testing.T) {
	t.Setenv(nccl.EnvLib, "")
	l, err := nccl.Load()
	if err != nil {
		require.ErrorIs(t, err, driver.ErrBackendUnavailable)
		require.Contains(t, err.Error(), "libnccl.so.2")
		return
	}
	require.GreaterOrEqual(t, l.Version, nccl.MinVersion)
}

func TestVersionString(t *testing.T) {
	require.Equal(t, "2.27.3", nccl.VersionString(22703))
}

// On a GPU with NCCL (CAPALLOC_NCCL_LIB or the default search): every
// collective on one rank, captured with its copies through a capalloc
// allocator and replayed with fresh data. One rank's results equal its
// inputs; the point is that the NCCL calls are recorded into the graph and
// run at every replay. Skipped, with the reason, without a GPU or NCCL.
func TestGPUCollectivesCaptured(t *testing.T) {
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
	comms, err := l.InitAll([]int{0})
	require.NoError(t, err)
	defer func() { require.NoError(t, comms[0].Destroy()) }()
	c := comms[0]
	t.Logf("NCCL %s from %s", nccl.VersionString(l.Version), l.Path)

	const count = 1 << 14
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

	for _, op := range []struct {
		name string
		call func() error
	}{
		{"all_reduce", func() error { return c.AllReduce(a, send, recv, count, nccl.Float32, nccl.Sum) }},
		{"all_gather", func() error { return c.AllGather(a, send, recv, count, nccl.Int32) }},
		{"reduce_scatter", func() error { return c.ReduceScatter(a, send, recv, count, nccl.Int32, nccl.Sum) }},
		{"all_to_all", func() error { return c.AllToAll(a, send, recv, count, nccl.Int32) }},
	} {
		t.Run(op.name, func(t *testing.T) { replayOneRank(t, a, in, out, send, recv, op.call, a.Synchronize) })
	}
	// Bad operands are typed errors before any NCCL call.
	require.ErrorIs(t, c.AllReduce(a, send, recv, n, nccl.Float32, nccl.Sum), alloc.ErrOutOfRange)
	require.True(t, errors.Is(c.AllReduce(a, send, recv, 1, nccl.DataType(99), nccl.Sum), alloc.ErrInvalidValue))
}

// replayOneRank captures call between the upload of in into send and the
// download of recv into out, replays it five times with fresh inputs,
// waiting with wait, and checks that one rank's result is its input.
func replayOneRank(t *testing.T, a *alloc.Allocator, in, out *alloc.HostBuffer, send, recv alloc.Buffer, call, wait func() error) {
	n := in.Size()
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		if err := a.UploadHost(send, 0, in, 0, n); err != nil {
			return err
		}
		if err := a.Memset(recv, 0, 0, n); err != nil {
			return err
		}
		if err := call(); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, recv, 0, n)
	})
	require.NoError(t, err)
	defer g.Close()
	for k := range 5 {
		for i := range in.Bytes() {
			in.Bytes()[i] = byte(i/4*7+k*13) & 0x3f // small float32 / int32 values
		}
		require.NoError(t, g.Launch())
		require.NoError(t, wait())
		require.True(t, bytes.Equal(in.Bytes(), out.Bytes()), "replay %d: one rank's result must equal its fresh input", k)
	}
}
