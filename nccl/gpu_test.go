package nccl_test

import (
	"bytes"
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
