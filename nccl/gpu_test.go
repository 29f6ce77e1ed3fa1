package nccl_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/nccl"
)

// onGPU loads NCCL (CAPALLOC_NCCL_LIB or the default search) and opens CUDA
// device 0 with an allocator over it, closed when the test ends, or skips
// the test, with the reason, without NCCL or a GPU: the TestGPU* tests run
// on a machine with both.
func onGPU(tb testing.TB) (*nccl.Library, *cuda.Driver, *alloc.Allocator) {
	tb.Helper()
	l, err := nccl.Load()
	if err != nil {
		tb.Skipf("no NCCL: %v", err)
	}
	d, err := cuda.New(cuda.Options{})
	if err != nil {
		tb.Skipf("no CUDA device: %v", err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	return l, d, alloctest.New(tb, d, alloc.Options{})
}

// On a GPU with NCCL (CAPALLOC_NCCL_LIB or the default search): every
// collective on one rank, captured with its copies through a capalloc
// allocator and replayed with fresh data. One rank's results equal its
// inputs; the point is that the NCCL calls are recorded into the graph and
// run at every replay. Skipped, with the reason, without a GPU or NCCL.
func TestGPUCollectivesCaptured(t *testing.T) {
	l, a, c := oneRankOnGPU(t)
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

// oneRankOnGPU is onGPU with a communicator of one rank on device 0
// (InitAll), destroyed without error when the test ends.
func oneRankOnGPU(tb testing.TB) (*nccl.Library, *alloc.Allocator, *nccl.Comm) {
	tb.Helper()
	l, _, a := onGPU(tb)
	comms, err := l.InitAll([]int{0})
	if err != nil {
		tb.Fatal(err)
	}
	c := comms[0]
	tb.Cleanup(func() {
		if err := c.Destroy(); err != nil {
			tb.Error(err)
		}
	})
	return l, a, c
}

// operands are one rank's buffers of n bytes each: pinned in and out on
// the host, send and recv on the device, freed when the test ends.
type operands struct {
	in, out    *alloc.HostBuffer
	send, recv alloc.Buffer
}

func newOperands(t *testing.T, a *alloc.Allocator, n int64) operands {
	t.Helper()
	o := operands{in: pinned(t, a, n), out: pinned(t, a, n)}
	for _, b := range []*alloc.Buffer{&o.send, &o.recv} {
		var err error
		*b, err = a.Alloc(n)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Free(*b) })
	}
	return o
}

// pinned is n bytes of pinned host memory, closed when the test ends.
func pinned(t *testing.T, a *alloc.Allocator, n int64) *alloc.HostBuffer {
	t.Helper()
	h, err := a.HostAlloc(n)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// roundTrip captures, on a, the upload of o.in into o.send, recv zeroed,
// collective (reading send, writing recv) and the download of recv into
// o.out, then replays it (replayed), waiting for each replay with
// a.Synchronize.
func roundTrip(t *testing.T, a *alloc.Allocator, o operands, replays int, fill func(i, k int) byte, collective func() error) {
	t.Helper()
	roundTripWait(t, a, o, replays, fill, collective, a.Synchronize)
}

// roundTripWait is roundTrip waiting for each replay with wait (a
// communicator's Wait, which aborts it past the watchdog).
func roundTripWait(t *testing.T, a *alloc.Allocator, o operands, replays int, fill func(i, k int) byte, collective, wait func() error) {
	t.Helper()
	n := int64(len(o.in.Bytes()))
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		if err := a.UploadHost(o.send, 0, o.in, 0, n); err != nil {
			return err
		}
		if err := a.Memset(o.recv, 0, 0, n); err != nil {
			return err
		}
		if err := collective(); err != nil {
			return err
		}
		return a.DownloadHost(o.out, 0, o.recv, 0, n)
	})
	require.NoError(t, err)
	replayed(t, g, o.in, o.out, replays, fill, wait)
}

// replayed launches g replays times, each with fresh bytes in in
// (fill(i, k) for byte i of replay k), and requires out to equal in after
// each, once wait returns: one rank's collective gives back its input,
// and the point is that the NCCL calls were recorded into the graph and
// run at every replay. It closes g.
func replayed(t *testing.T, g *alloc.Graph, in, out *alloc.HostBuffer, replays int, fill func(i, k int) byte, wait func() error) {
	t.Helper()
	defer g.Close()
	for k := range replays {
		for i := range in.Bytes() {
			in.Bytes()[i] = fill(i, k)
		}
		require.NoError(t, g.Launch())
		require.NoError(t, wait())
		require.True(t, bytes.Equal(in.Bytes(), out.Bytes()), "replay %d: one rank's result must equal its fresh input", k)
	}
}
