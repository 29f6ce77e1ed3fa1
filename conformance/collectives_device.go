package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/symheap"
)

// deviceHeap: the symmetric heap in device memory (symheap.OpenDevice)
// where the backend has IPC memory handles (cuda, hip), two ranks as
// goroutines, each on its own driver behind a Spy. Opening costs each
// rank one copy and one synchronize for the peer table, which holds every
// rank's base; allocation in a capture makes no driver call; each rank
// gathers both ranks' bytes by copies captured once and replayed with
// fresh data. Elsewhere the open is refused at once with
// errors.ErrUnsupported, with no driver call but the capture status query.
func (s *suite) deviceHeap(t *testing.T) {
	const n = 2
	spies := make([]*alloctest.Spy, n)
	as := make([]*alloc.Allocator, n)
	for r := range n {
		spies[r] = alloctest.NewSpy(s.openDriver(t))
		a, err := alloc.New(spies[r], alloc.Options{Watchdog: testWatchdog})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, a.Close()) })
		as[r] = a
	}
	x := symheap.NewLocalExchange(n)
	if !symheap.DeviceRuns(spies[0]) {
		deviceHeapRefusedAtOnce(t, spies[0], as[0], x)
		return
	}
	heaps := make([]*symheap.DeviceHeap, n)
	each := func(fn func(r int) error) {
		for r, err := range parallelEach(n, fn) {
			require.NoError(t, err, "rank %d", r)
		}
	}
	each(func(r int) (err error) {
		heaps[r], err = symheap.OpenDevice(r, as[r], x, deviceHeapSize, symheap.DeviceOptions{Timeout: 30 * time.Second})
		return err
	})
	for r, h := range heaps {
		requirePeerTable(t, spies[r], as[r], h, r, n)
	}
	in, out, graphs := captureGathers(t, spies, as, heaps)
	for k := range 5 {
		requireGatherReplay(t, as, heaps, graphs, in, out, k)
	}
	for _, g := range graphs {
		require.NoError(t, g.Close())
	}
	each(func(r int) error { return heaps[r].Close() })
}

const (
	deviceHeapSize  = 1 << 16 // each rank's heap
	deviceHeapChunk = 4096    // each rank's share of a gather
)

// deviceHeapRefusedAtOnce: where the driver has no IPC memory handles,
// OpenDevice is refused with errors.ErrUnsupported and no driver call but
// the status query.
func deviceHeapRefusedAtOnce(t *testing.T, spy *alloctest.Spy, a *alloc.Allocator, x symheap.Exchange) {
	_, ipc := spy.Inner().(driver.IPCMemory)
	require.False(t, ipc, "the driver has IPC memory handles, yet symheap.DeviceRuns says no")
	before := spy.Snapshot()
	_, err := symheap.OpenDevice(0, a, x, deviceHeapSize, symheap.DeviceOptions{Timeout: 10 * time.Second})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	require.Zero(t, spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus, alloctest.MethodName), "no driver call but the status query")
	t.Logf("no IPC memory handles on this backend; the refusal was checked: %v", err)
}

// requirePeerTable: opening cost rank r one copy and one synchronize, and
// its peer table holds every rank's base (its pointer less the pad).
func requirePeerTable(t *testing.T, spy *alloctest.Spy, a *alloc.Allocator, h *symheap.DeviceHeap, r, n int) {
	c := spy.Snapshot()
	require.EqualValues(t, 1, c[alloctest.MethodCopyHtoD], "rank %d: one copy of the peer table", r)
	require.EqualValues(t, 1, c[alloctest.MethodStreamSynchronize], "rank %d: one synchronize", r)
	tab := make([]byte, h.PeerTable().Size())
	require.NoError(t, a.Download(tab, h.PeerTable(), 0))
	for p := range n {
		ptr, err := h.Ptr(p, symheap.Tensor{Off: 0, Size: 1})
		require.NoError(t, err)
		require.EqualValues(t, ptr-symheap.SignalPadBytes, binary.LittleEndian.Uint64(tab[8*p:]), "rank %d's table entry for rank %d", r, p)
	}
	require.EqualValues(t, h.Buffer().Ptr(), binary.LittleEndian.Uint64(tab[8*r:]))
}

// captureGathers captures, on each rank, copies of every rank's input
// chunk into its own output: the heap's allocations in the capture make
// no driver call and, made in the same order, get the same offsets.
func captureGathers(t *testing.T, spies []*alloctest.Spy, as []*alloc.Allocator, heaps []*symheap.DeviceHeap) (in, out symheap.Tensor, graphs []*alloc.Graph) {
	n := len(heaps)
	graphs = make([]*alloc.Graph, n)
	for r, h := range heaps {
		require.NoError(t, as[r].BeginCapture(alloc.Global))
		before := spies[r].Snapshot()
		i, err := h.Alloc(deviceHeapChunk)
		require.NoError(t, err)
		o, err := h.Alloc(int64(n) * deviceHeapChunk)
		require.NoError(t, err)
		require.Zero(t, spies[r].Snapshot().Sub(before).Total(), "allocation in the heap makes no driver call")
		if r == 0 {
			in, out = i, o
		}
		require.Equal(t, in, i, "the same sequence gives the same offsets")
		require.Equal(t, out, o)
		for p := range n {
			require.NoError(t, h.Copy(r, symheap.Tensor{Off: out.Off + int64(p)*deviceHeapChunk, Size: deviceHeapChunk}, p, in))
		}
		graphs[r], err = as[r].EndCapture()
		require.NoError(t, err)
	}
	return in, out, graphs
}

// requireGatherReplay: replay k, with fresh bytes in every rank's input,
// gives each rank every rank's bytes.
func requireGatherReplay(t *testing.T, as []*alloc.Allocator, heaps []*symheap.DeviceHeap, graphs []*alloc.Graph, in, out symheap.Tensor, k int) {
	const chunk = deviceHeapChunk
	for r, h := range heaps {
		require.NoError(t, as[r].Upload(h.Buffer(), symheap.SignalPadBytes+in.Off, bytes.Repeat([]byte{byte(16*k + r + 1)}, chunk)))
	}
	for r := range heaps {
		require.NoError(t, graphs[r].Launch())
		require.NoError(t, as[r].Synchronize())
	}
	for r, h := range heaps {
		got := make([]byte, out.Size)
		require.NoError(t, as[r].Download(got, h.Buffer(), symheap.SignalPadBytes+out.Off))
		for p := range heaps {
			require.Equal(t, bytes.Repeat([]byte{byte(16*k + p + 1)}, chunk), got[p*chunk:(p+1)*chunk], "replay %d: rank %d's copy of rank %d's bytes", k, r, p)
		}
	}
}
