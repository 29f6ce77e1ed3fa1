package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/symheap"
)

// deviceHeapLifetime: a device heap's memory is never touched after its
// rank released it (docs/reliability.md, round 4, items 6-8). Each cell
// hands the memory a closed rank gave back to a fresh buffer of that rank,
// fills it with a pattern and checks, after the survivor's work, that the
// pattern is intact: a kernel writing into the freed pad would change it
// (the fakes do not fault on such a store; a GPU would).
func (s *suite) deviceHeapLifetime(t *testing.T) {
	t.Run("peer_closed_alone", s.peerClosedAlone)
	t.Run("replay_after_close", s.replayAfterClose)
	t.Run("allocator_closed_first", s.allocatorClosedFirst)
}

// lifeRanks is n goroutine ranks of a device heap, each with its own
// driver and allocator; the cleanup closes what the cell did not.
type lifeRanks struct {
	drivers []driver.Driver
	as      []*alloc.Allocator
	heaps   []*symheap.DeviceHeap
	aClosed []bool
	hClosed []bool
	size    int64
}

// openLifeRanks opens the ranks; ok is false where the backend has no
// device heap or no kernels of ours (newDeviceWorld checks the refusals).
func (s *suite) openLifeRanks(t *testing.T, n int, timeout time.Duration) (*lifeRanks, bool) {
	t.Helper()
	l := &lifeRanks{size: 1 << 16, aClosed: make([]bool, n), hClosed: make([]bool, n)}
	for range n {
		d := s.openDriver(t)
		a, err := alloc.New(d, alloc.Options{Watchdog: testWatchdog})
		require.NoError(t, err)
		l.drivers, l.as = append(l.drivers, d), append(l.as, a)
	}
	t.Cleanup(func() {
		for r, a := range l.as {
			if !l.aClosed[r] {
				require.NoError(t, a.Close(), "rank %d's allocator", r)
			}
		}
	})
	if !symheap.DeviceRuns(l.as[0].Driver()) {
		t.Log("no device heap on this backend (collectives/device_heap checks the refusal)")
		return nil, false
	}
	x := symheap.NewLocalExchange(n)
	l.heaps = make([]*symheap.DeviceHeap, n)
	for r, err := range parallelEach(n, func(r int) (err error) {
		l.heaps[r], err = symheap.OpenDevice(r, l.as[r], x, l.size, symheap.DeviceOptions{Timeout: timeout})
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for r, err := range parallelEach(n, func(r int) error {
			if l.hClosed[r] {
				return nil
			}
			return l.heaps[r].Close()
		}) {
			require.NoError(t, err, "closing rank %d's heap", r)
		}
		for r := range l.hClosed {
			l.hClosed[r] = true
		}
	})
	if err := l.heaps[0].CollectivesRun(); err != nil {
		t.Logf("no kernels of ours on this backend (collectives/device_heap checks the refusal): %v", err)
		return nil, false
	}
	return l, true
}

// reuse allocates, on a, as many bytes as a heap's allocation (its pad,
// then the heap) and fills them with a pattern: the memory a closed rank
// gave back, where the allocator or the runtime hands it out again.
func (l *lifeRanks) reuse(t *testing.T, a *alloc.Allocator) (alloc.Buffer, []byte) {
	t.Helper()
	b, err := a.AllocSync(symheap.SignalPadBytes + l.size)
	require.NoError(t, err)
	pat := bytes.Repeat([]byte{0x5A}, int(b.Size()))
	require.NoError(t, a.Upload(b, 0, pat))
	return b, pat
}

// untouched checks that b still holds pat.
func untouched(t *testing.T, a *alloc.Allocator, b alloc.Buffer, pat []byte, what string) {
	t.Helper()
	got := make([]byte, len(pat))
	require.NoError(t, a.Download(got, b, 0))
	if !bytes.Equal(got, pat) {
		t.Fatalf("%s: the memory a closed rank released was written (first changed byte near %d)", what, firstDiff(got, pat))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// Item 6: rank 1 closes alone; rank 0's next collective fails with
// ErrPeerClosed and writes nothing into rank 1's released memory (rank
// 1's Close itself waits for rank 0 at most the timeout:
// ErrExchangeTimeout); rank 0's Close then releases everything at once.
func (s *suite) peerClosedAlone(t *testing.T) {
	l, ok := s.openLifeRanks(t, 2, time.Second)
	if !ok {
		return
	}
	for r, err := range parallelEach(2, func(r int) error {
		if err := l.heaps[r].Barrier(); err != nil {
			return err
		}
		return l.heaps[r].Synchronize()
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	cerr := l.heaps[1].Close()
	l.hClosed[1] = true
	b, pat := l.reuse(t, l.as[1])

	err := l.heaps[0].Barrier()
	if err == nil {
		err = l.heaps[0].Synchronize()
	}
	untouched(t, l.as[1], b, pat, "rank 0's barrier")
	require.NoError(t, l.as[1].Free(b))
	require.ErrorIs(t, err, symheap.ErrPeerClosed, "the survivor's collective: %v", err)
	require.ErrorIs(t, l.heaps[0].Err(), symheap.ErrPeerClosed, "the heap stays broken")
	require.ErrorIs(t, cerr, symheap.ErrExchangeTimeout, "a rank that closes alone waits for its peers at most the timeout, and says so")

	require.NoError(t, l.heaps[0].Close(), "the survivor's Close: the peer already left its message in the round")
	l.hClosed[0] = true
}

// Item 7: a graph that recorded [Write, all-reduce, Read] is replayed
// after both heaps were closed and rank 1's graph and allocator too: the
// all-reduce does not run (the output is the input), nothing of rank 1's
// is written, and the heap's Synchronize says the heap is closed.
func (s *suite) replayAfterClose(t *testing.T) {
	l, ok := s.openLifeRanks(t, 2, time.Second)
	if !ok {
		return
	}
	c := newClosedReplay(t, l)
	defer c.closeHostBuffers(t)
	c.captureAllReduce(t)
	a1, b, pat := c.closeRankOne(t)
	clear(c.outs[0].Bytes())
	require.NoError(t, c.graphs[0].Launch())
	require.NoError(t, l.as[0].Synchronize())
	err := l.heaps[0].Synchronize()
	untouched(t, a1, b, pat, "rank 0's replayed all-reduce")
	require.NoError(t, a1.Free(b))
	require.NoError(t, a1.Close())
	for i := range closedReplaySize / 4 {
		require.EqualValues(t, 1, binary.LittleEndian.Uint32(c.outs[0].Bytes()[4*i:]), "element %d: the replayed all-reduce must not run on closed heaps", i)
	}
	require.ErrorIs(t, err, alloc.ErrClosed)
	require.Contains(t, err.Error(), "refused", "the heap's Synchronize says what became of the replayed collectives")
}

// closedReplaySize is the bytes of replay_after_close's tensor.
const closedReplaySize = 4096

// closedReplay is replay_after_close's world: per rank a tensor of the
// heap, pinned input (rank r's holds r+1 in every int32) and output, and
// the graph that all-reduces one into the other.
type closedReplay struct {
	l         *lifeRanks
	x         []symheap.Tensor
	ins, outs []*alloc.HostBuffer
	graphs    []*alloc.Graph
}

func newClosedReplay(t *testing.T, l *lifeRanks) *closedReplay {
	n := len(l.heaps)
	c := &closedReplay{l: l, x: make([]symheap.Tensor, n),
		ins: make([]*alloc.HostBuffer, n), outs: make([]*alloc.HostBuffer, n), graphs: make([]*alloc.Graph, n)}
	t.Cleanup(func() { // before the allocators' (cleanups run last first)
		for _, g := range c.graphs {
			if g != nil {
				_ = g.Close() // a second Close is ErrClosed
			}
		}
	})
	for r, h := range l.heaps {
		var err error
		c.x[r], err = h.Alloc(closedReplaySize)
		require.NoError(t, err)
		c.ins[r], err = l.as[r].HostAlloc(closedReplaySize)
		require.NoError(t, err)
		c.outs[r], err = l.as[r].HostAlloc(closedReplaySize)
		require.NoError(t, err)
		for i := range closedReplaySize / 4 {
			binary.LittleEndian.PutUint32(c.ins[r].Bytes()[4*i:], uint32(r+1))
		}
	}
	return c
}

// closeHostBuffers closes the pinned buffers of the ranks whose allocator
// is still open.
func (c *closedReplay) closeHostBuffers(t *testing.T) {
	for r := range c.ins {
		if !c.l.aClosed[r] {
			require.NoError(t, c.ins[r].Close())
			require.NoError(t, c.outs[r].Close())
		}
	}
}

// captureAllReduce captures [Write, all-reduce, Read] on every rank and
// launches it once: the captured all-reduce sums.
func (c *closedReplay) captureAllReduce(t *testing.T) {
	l := c.l
	for r, err := range parallelEach(len(l.heaps), func(r int) (err error) {
		h := l.heaps[r]
		c.graphs[r], err = l.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
			if err := h.Write(c.x[r], c.ins[r], 0); err != nil {
				return err
			}
			if err := h.AllReduce(c.x[r], symheap.Int32); err != nil {
				return err
			}
			return h.Read(c.outs[r], 0, c.x[r])
		})
		if err != nil {
			return err
		}
		if err := c.graphs[r].Launch(); err != nil {
			return err
		}
		return h.Synchronize()
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range c.outs {
		require.EqualValues(t, 3, binary.LittleEndian.Uint32(c.outs[r].Bytes()), "rank %d: the captured all-reduce sums", r)
	}
}

// closeRankOne closes both heaps, then rank 1's graph, pinned buffers
// and allocator, and hands the memory rank 1 gave back out again on its
// device, filled with pat, through a new allocator a1.
func (c *closedReplay) closeRankOne(t *testing.T) (a1 *alloc.Allocator, b alloc.Buffer, pat []byte) {
	l := c.l
	for r, err := range parallelEach(len(l.heaps), func(r int) error { return l.heaps[r].Close() }) {
		require.NoError(t, err, "closing rank %d's heap", r)
	}
	l.hClosed[0], l.hClosed[1] = true, true
	require.NoError(t, c.graphs[1].Close())
	c.graphs[1] = nil
	require.NoError(t, c.ins[1].Close())
	require.NoError(t, c.outs[1].Close())
	require.NoError(t, l.as[1].Close())
	l.aClosed[1] = true
	// The memory rank 1 gave back, handed out again on its device.
	a1, err := alloc.New(l.drivers[1], alloc.Options{Watchdog: testWatchdog})
	require.NoError(t, err)
	b, pat = l.reuse(t, a1)
	return a1, b, pat
}

// Item 8: rank 1's allocator is closed under its open heap (the
// allocator reports the heap's memory as leaked and releases it); the
// heaps' Close, in parallel, costs rank 0 no timeout: it returns nil,
// and rank 1's says its allocator was closed first.
func (s *suite) allocatorClosedFirst(t *testing.T) {
	l, ok := s.openLifeRanks(t, 2, 2*time.Second)
	if !ok {
		return
	}
	require.ErrorIs(t, l.as[1].Close(), alloc.ErrLeaked, "the heap's memory was not freed")
	l.aClosed[1] = true
	errs := parallelEach(2, func(r int) error { return l.heaps[r].Close() })
	l.hClosed[0], l.hClosed[1] = true, true
	require.NoError(t, errs[0], "rank 0 pays nothing for rank 1's order")
	require.ErrorIs(t, errs[1], alloc.ErrClosed, "rank 1's allocator was closed first")
	require.False(t, errors.Is(errs[1], symheap.ErrExchangeTimeout), "%v", errs[1])
}
