package nccl_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
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
	l, _, a := onGPU(t)
	comms, err := l.InitAll([]int{0})
	require.NoError(t, err)
	defer func() { require.NoError(t, comms[0].Destroy()) }()
	c := comms[0]
	t.Logf("NCCL %s from %s", nccl.VersionString(l.Version), l.Path)

	const count = 1 << 14
	const n = 4 * count
	o := newOperands(t, a, n)
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"all_reduce", func() error { return c.AllReduce(a, o.send, o.recv, count, nccl.Float32, nccl.Sum) }},
		{"all_gather", func() error { return c.AllGather(a, o.send, o.recv, count, nccl.Int32) }},
		{"reduce_scatter", func() error { return c.ReduceScatter(a, o.send, o.recv, count, nccl.Int32, nccl.Sum) }},
		{"all_to_all", func() error { return c.AllToAll(a, o.send, o.recv, count, nccl.Int32) }},
	} {
		t.Run(op.name, func(t *testing.T) {
			// Small float32 / int32 values.
			roundTrip(t, a, o, 5, func(i, k int) byte { return byte(i/4*7+k*13) & 0x3f }, op.call)
		})
	}
	// Bad operands are typed errors before any NCCL call.
	require.ErrorIs(t, c.AllReduce(a, o.send, o.recv, n, nccl.Float32, nccl.Sum), alloc.ErrOutOfRange)
	require.True(t, errors.Is(c.AllReduce(a, o.send, o.recv, 1, nccl.DataType(99), nccl.Sum), alloc.ErrInvalidValue))
}
