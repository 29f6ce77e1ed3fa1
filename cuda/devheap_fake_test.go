package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

// The device heap (symheap.OpenDevice) over the fake runtime: ranks as
// goroutines (peers in the same process are used as they are, not
// IPC-opened) and ranks as processes (the handles really cross: the fake
// maps the exporter's memfd), each rank's driver behind a Spy that counts
// its calls.

const devHeapSize = 1 << 16

// devRank is one rank's driver, spy and allocator.
type devRank struct {
	d   driver.Driver
	spy *alloctest.Spy
	a   *alloc.Allocator
}

func newDevRank(t *testing.T, wrap func(*Driver) driver.Driver) *devRank {
	t.Helper()
	d, err := New(Options{})
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	var drv driver.Driver = d
	if wrap != nil {
		drv = wrap(d)
	}
	r := &devRank{d: drv, spy: alloctest.NewSpy(drv)}
	r.a, err = alloc.New(r.spy, alloc.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.a.Close()) })
	return r
}

// eachRank runs fn for ranks 0..n-1, each in its own goroutine, and
// returns their errors.
func eachRank(n int, fn func(r int) error) []error { return ranks.Each(n, fn) }

// table reads a heap's peer table back from the device.
func table(t *testing.T, h *symheap.DeviceHeap) []driver.DevicePtr {
	t.Helper()
	b := make([]byte, h.PeerTable().Size())
	require.NoError(t, h.Allocator().Download(b, h.PeerTable(), 0))
	var out []driver.DevicePtr
	for i := 0; i < len(b); i += 8 {
		out = append(out, driver.DevicePtr(binary.LittleEndian.Uint64(b[i:])))
	}
	return out
}

// upload writes b into this rank's bytes of x.
func upload(t *testing.T, h *symheap.DeviceHeap, x symheap.Tensor, b []byte) {
	t.Helper()
	require.NoError(t, h.Allocator().Upload(h.Buffer(), symheap.SignalPadBytes+x.Off, b))
}

// download reads this rank's bytes of x.
func download(t *testing.T, h *symheap.DeviceHeap, x symheap.Tensor) []byte {
	t.Helper()
	b := make([]byte, x.Size)
	require.NoError(t, h.Allocator().Download(b, h.Buffer(), symheap.SignalPadBytes+x.Off))
	return b
}

// Three goroutine ranks: the open makes, per rank, two synchronous
// allocations, one handle export, no IPC open (same process), one memset
// of the pad, one copy and one synchronize; the device table holds every
// rank's base; allocation makes no driver call; bad operands are typed;
// opening and closing in a capture are refused; Close frees everything.
func TestFakeDeviceHeapGoroutineRanks(t *testing.T) {
	fake.Lib(t)
	const n = 3
	ranks := make([]*devRank, n)
	for r := range ranks {
		ranks[r] = newDevRank(t, nil)
		require.True(t, symheap.DeviceRuns(ranks[r].spy), "looked through the Spy")
	}
	x := symheap.NewLocalExchange(n)
	heaps := make([]*symheap.DeviceHeap, n)
	errs := eachRank(n, func(r int) (err error) {
		heaps[r], err = symheap.OpenDevice(r, ranks[r].a, x, devHeapSize, symheap.DeviceOptions{Timeout: 10 * time.Second})
		return err
	})
	for r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
		c := ranks[r].spy.Snapshot()
		require.EqualValues(t, 2, c[alloctest.MethodMalloc], "heap and table: %v", c)
		require.EqualValues(t, 1, c[alloctest.MethodIPCGetMemHandle])
		require.EqualValues(t, 0, c[alloctest.MethodIPCOpenMemHandle], "peers in this process are not IPC-opened")
		require.EqualValues(t, 1, c[alloctest.MethodCopyHtoD], "one copy of the table")
		require.EqualValues(t, 1, c[alloctest.MethodStreamSynchronize], "one synchronize")
		require.EqualValues(t, 1, c[alloctest.MethodMemsetAsync], "the signal pad")
	}
	for r, h := range heaps {
		tab := table(t, h)
		for p := range n {
			require.Equal(t, heaps[p].Buffer().Ptr(), tab[p], "rank %d's table entry for rank %d", r, p)
		}
		pad := make([]byte, symheap.SignalPadBytes)
		require.NoError(t, h.Allocator().Download(pad, h.Buffer(), 0))
		require.Equal(t, make([]byte, symheap.SignalPadBytes), pad, "the pad is zeroed")
	}

	// The same allocation sequence, the same offsets, no driver call
	// (copies between the heaps, captured and replayed, are the
	// conformance cell Collectives/device_heap, run on this fake too).
	var in, out symheap.Tensor
	for r, h := range heaps {
		before := ranks[r].spy.Snapshot()
		a, err := h.Alloc(1000)
		require.NoError(t, err)
		b, err := h.Alloc(n * 1000)
		require.NoError(t, err)
		require.Zero(t, ranks[r].spy.Snapshot().Sub(before).Total())
		if r == 0 {
			in, out = a, b
		}
		require.Equal(t, in, a)
		require.Equal(t, out, b)
	}

	// Bad operands are typed errors, queued nothing.
	h := heaps[0]
	require.ErrorIs(t, h.Copy(0, in, n, in), alloc.ErrInvalidValue)
	require.ErrorIs(t, h.Copy(0, in, 1, out), alloc.ErrInvalidSize)
	require.ErrorIs(t, h.Copy(0, symheap.Tensor{Off: devHeapSize, Size: 8}, 1, symheap.Tensor{Off: 0, Size: 8}), alloc.ErrOutOfRange)
	_, err := h.Ptr(-1, in)
	require.ErrorIs(t, err, alloc.ErrInvalidValue)
	_, err = h.Alloc(devHeapSize)
	require.ErrorIs(t, err, symheap.ErrHeapFull)

	// Opening another heap during a capture: refused, no driver call.
	a0 := ranks[0].a
	require.NoError(t, a0.BeginCapture(alloc.Global))
	before := ranks[0].spy.Snapshot()
	_, err = symheap.OpenDevice(0, a0, symheap.NewLocalExchange(1), devHeapSize, symheap.DeviceOptions{})
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Zero(t, ranks[0].spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus))
	require.ErrorIs(t, h.Close(), driver.ErrCaptureIllegalOp, "closing in a capture is refused too")
	g, err := a0.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())

	// Close is collective; afterwards every allocation is back.
	errs = eachRank(n, func(r int) error { return heaps[r].Close() })
	for r := range ranks {
		require.NoError(t, errs[r])
		c := ranks[r].spy.Snapshot()
		require.Equal(t, c[alloctest.MethodMalloc], c[alloctest.MethodFree], "rank %d freed what it allocated", r)
		require.Zero(t, ranks[r].a.Stats().LiveBuffers)
	}
	require.ErrorIs(t, h.Close(), alloc.ErrClosed)
	_, err = h.Ptr(0, in)
	require.ErrorIs(t, err, alloc.ErrClosed)
}

// badExport hands out a handle no runtime can open.
type badExport struct{ *Driver }

func (badExport) IPCGetMemHandle(driver.DevicePtr) ([]byte, error) {
	return make([]byte, ipcHandleSize), nil
}

// failAlloc fails the heap's allocation.
type failAlloc struct{ *Driver }

func (failAlloc) Malloc(int64) (driver.DevicePtr, error) {
	return 0, fmt.Errorf("%w: test: no memory", alloc.ErrOutOfMemory)
}

// A rank whose allocation fails tells its peers in the first round: every
// rank fails with ErrPeerOpen naming it, the failing one with its cause
// too, and nobody keeps memory. A rank that never comes is
// ErrExchangeTimeout.
func TestFakeDeviceHeapAllOrNothingInProcess(t *testing.T) {
	fake.Lib(t)
	const n = 3
	ranks := []*devRank{newDevRank(t, nil), newDevRank(t, func(d *Driver) driver.Driver { return failAlloc{d} }), newDevRank(t, nil)}
	x := symheap.NewLocalExchange(n)
	errs := eachRank(n, func(r int) error {
		_, err := symheap.OpenDevice(r, ranks[r].a, x, devHeapSize, symheap.DeviceOptions{Timeout: 10 * time.Second})
		return err
	})
	for r := range ranks {
		require.ErrorIs(t, errs[r], symheap.ErrPeerOpen, "rank %d", r)
		require.Contains(t, errs[r].Error(), "rank 1: symheap: device heap of rank 1")
		c := ranks[r].spy.Snapshot()
		require.Equal(t, c[alloctest.MethodMalloc]-boolInt(r == 1), c[alloctest.MethodFree], "rank %d freed what it allocated", r)
		require.Zero(t, ranks[r].a.Stats().LiveBuffers)
	}
	require.ErrorIs(t, errs[1], alloc.ErrOutOfMemory, "the failing rank's own cause")

	start := time.Now()
	_, err := symheap.OpenDevice(0, ranks[0].a, symheap.NewLocalExchange(2), devHeapSize, symheap.DeviceOptions{Timeout: 100 * time.Millisecond})
	require.ErrorIs(t, err, symheap.ErrExchangeTimeout)
	require.Contains(t, err.Error(), "rank(s) [1]")
	require.Less(t, time.Since(start), 3*time.Second)
	require.Zero(t, ranks[0].a.Stats().LiveBuffers, "freed after the timeout")
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// devHeapChildEnv makes the test binary a rank of
// TestFakeDeviceHeapAcrossProcesses or TestGPUDeviceHeap:
// "rank,ranks,dir,mode", mode "ok" or "bad" over the fake, "gpu" on a GPU.
const devHeapChildEnv = "CAPALLOC_TEST_DEVHEAP_RANK"

// Three processes over the fake exchange handles through files and open
// each other's heaps for real (IPC). In "ok" mode each reads every peer's
// bytes through a captured copy, replayed after the peers wrote fresh
// ones, and closes; in "bad" mode rank 2 exports a handle nobody can
// open: every rank fails with ErrPeerOpen naming rank 2's heap, and
// closes every handle it had opened.
func TestFakeDeviceHeapAcrossProcesses(t *testing.T) {
	if asRank(t, devHeapChildEnv, devHeapChild) {
		return
	}
	fake.Lib(t)
	for _, mode := range []string{"ok", "bad"} {
		t.Run(mode, func(t *testing.T) { runDevHeapRanks(t, "TestFakeDeviceHeapAcrossProcesses", 3, mode) })
	}
}

// runDevHeapRanks runs n ranks of the device heap as processes: this test
// binary, running test, in rank mode.
func runDevHeapRanks(t *testing.T, test string, n int, mode string) {
	runRanks(t, test, devHeapChildEnv, n, func(r int, dir string) string {
		return fmt.Sprintf("%d,%d,%s,%s", r, n, dir, mode)
	})
}

func devHeapChild(t *testing.T, spec string) {
	f := strings.SplitN(spec, ",", 4)
	rank, _ := strconv.Atoi(f[0])
	n, _ := strconv.Atoi(f[1])
	dir, mode := f[2], f[3]
	var log *gpurttest.Log // the fake's call log; none on a GPU
	if mode != "gpu" {
		log = gpurttest.OpenLog(t, os.Getenv(LibEnv))
	}
	var wrap func(*Driver) driver.Driver
	if mode == "bad" && rank == 2 {
		wrap = func(d *Driver) driver.Driver { return badExport{d} }
	}
	me := newDevRank(t, wrap)
	x := symheap.FileExchange(dir, n)
	const timeout = 20 * time.Second
	h, err := symheap.OpenDevice(rank, me.a, x, devHeapSize, symheap.DeviceOptions{Timeout: timeout})
	if mode == "bad" {
		lines := log.Lines()
		opened := len(gpurttest.Find(lines, "cudaIpcOpenMemHandle")) - len(gpurttest.Find(lines, "cudaIpcOpenMemHandle", "size=0 "))
		require.ErrorIs(t, err, symheap.ErrPeerOpen)
		require.Contains(t, err.Error(), "opening rank 2's heap")
		require.Equal(t, opened, len(gpurttest.Find(lines, "cudaIpcCloseMemHandle")), "every handle opened was closed")
		if rank == 2 {
			require.Equal(t, n-1, opened, "rank 2 had opened both peers")
		}
		c := me.spy.Snapshot()
		require.Equal(t, c[alloctest.MethodMalloc], c[alloctest.MethodFree])
		return
	}
	require.NoError(t, err)
	c := me.spy.Snapshot()
	require.EqualValues(t, n-1, c[alloctest.MethodIPCOpenMemHandle], "every peer IPC-opened")
	require.EqualValues(t, 1, c[alloctest.MethodCopyHtoD])
	require.EqualValues(t, 1, c[alloctest.MethodStreamSynchronize])
	tab := table(t, h)
	require.Equal(t, h.Buffer().Ptr(), tab[rank])
	for p := range n {
		require.NotZero(t, tab[p])
		ptr, err := h.Ptr(p, symheap.Tensor{Off: 0, Size: 1})
		require.NoError(t, err)
		require.Equal(t, tab[p]+symheap.SignalPadBytes, ptr)
	}

	in, err := h.Alloc(512)
	require.NoError(t, err)
	out, err := h.Alloc(int64(n) * 512)
	require.NoError(t, err)
	g, err := me.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		for p := range n {
			if err := h.Copy(rank, symheap.Tensor{Off: out.Off + int64(p)*512, Size: 512}, p, in); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	defer g.Close()
	barrier := func() {
		_, err := x.AllGather(rank, nil, timeout)
		require.NoError(t, err)
	}
	for k := range 2 {
		upload(t, h, in, bytes.Repeat([]byte{byte(16*k + rank + 1)}, 512))
		barrier() // every rank wrote
		require.NoError(t, g.Launch())
		require.NoError(t, me.a.Synchronize())
		got := download(t, h, out)
		for p := range n {
			require.Equal(t, bytes.Repeat([]byte{byte(16*k + p + 1)}, 512), got[p*512:(p+1)*512], "replay %d, from rank %d", k, p)
		}
		barrier() // every rank read
	}
	require.NoError(t, g.Close())
	require.NoError(t, h.Close())
	c = me.spy.Snapshot()
	require.EqualValues(t, n-1, c[alloctest.MethodIPCCloseMemHandle], "every peer closed")
	if log != nil {
		require.Len(t, gpurttest.Find(log.Lines(), "cudaIpcCloseMemHandle"), n-1, "and the runtime saw the closes")
	}
	require.Equal(t, c[alloctest.MethodMalloc], c[alloctest.MethodFree])
}
