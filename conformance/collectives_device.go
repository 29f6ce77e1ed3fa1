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
	const n, size, replays = 2, 1 << 16, 5
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
		_, ipc := spies[0].Inner().(driver.IPCMemory)
		require.False(t, ipc, "the driver has IPC memory handles, yet symheap.DeviceRuns says no")
		before := spies[0].Snapshot()
		_, err := symheap.OpenDevice(0, as[0], x, size, symheap.DeviceOptions{Timeout: 10 * time.Second})
		require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
		require.Zero(t, spies[0].Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus, alloctest.MethodName), "no driver call but the status query")
		t.Logf("no IPC memory handles on this backend; the refusal was checked: %v", err)
		return
	}
	heaps := make([]*symheap.DeviceHeap, n)
	each := func(fn func(r int) error) {
		for r, err := range parallelEach(n, fn) {
			require.NoError(t, err, "rank %d", r)
		}
	}
	each(func(r int) (err error) {
		heaps[r], err = symheap.OpenDevice(r, as[r], x, size, symheap.DeviceOptions{Timeout: 30 * time.Second})
		return err
	})
	for r, h := range heaps {
		c := spies[r].Snapshot()
		require.EqualValues(t, 1, c[alloctest.MethodCopyHtoD], "rank %d: one copy of the peer table", r)
		require.EqualValues(t, 1, c[alloctest.MethodStreamSynchronize], "rank %d: one synchronize", r)
		tab := make([]byte, h.PeerTable().Size())
		require.NoError(t, as[r].Download(tab, h.PeerTable(), 0))
		for p := range n {
			ptr, err := h.Ptr(p, symheap.Tensor{Off: 0, Size: 1})
			require.NoError(t, err)
			require.EqualValues(t, ptr-symheap.SignalPadBytes, binary.LittleEndian.Uint64(tab[8*p:]), "rank %d's table entry for rank %d", r, p)
		}
		require.EqualValues(t, h.Buffer().Ptr(), binary.LittleEndian.Uint64(tab[8*r:]))
	}

	const chunk = 4096
	var in, out symheap.Tensor
	graphs := make([]*alloc.Graph, n)
	for r, h := range heaps {
		require.NoError(t, as[r].BeginCapture(alloc.Global))
		before := spies[r].Snapshot()
		i, err := h.Alloc(chunk)
		require.NoError(t, err)
		o, err := h.Alloc(n * chunk)
		require.NoError(t, err)
		require.Zero(t, spies[r].Snapshot().Sub(before).Total(), "allocation in the heap makes no driver call")
		if r == 0 {
			in, out = i, o
		}
		require.Equal(t, in, i, "the same sequence gives the same offsets")
		require.Equal(t, out, o)
		for p := range n {
			require.NoError(t, h.Copy(r, symheap.Tensor{Off: out.Off + int64(p)*chunk, Size: chunk}, p, in))
		}
		graphs[r], err = as[r].EndCapture()
		require.NoError(t, err)
	}
	for k := range replays {
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
			for p := range n {
				require.Equal(t, bytes.Repeat([]byte{byte(16*k + p + 1)}, chunk), got[p*chunk:(p+1)*chunk], "replay %d: rank %d's copy of rank %d's bytes", k, r, p)
			}
		}
	}
	for _, g := range graphs {
		require.NoError(t, g.Close())
	}
	each(func(r int) error { return heaps[r].Close() })
}
