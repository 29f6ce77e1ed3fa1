package symheap_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// rankHeaps opens ranks goroutine ranks of one group, each on its own cpu
// allocator (its own stream), with the timeout given.
func rankHeaps(t *testing.T, ranks int, timeout time.Duration) []*symheap.Heap {
	t.Helper()
	g, err := symheap.NewGroup(ranks, 1<<16)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	hs := make([]*symheap.Heap, ranks)
	for r := range ranks {
		hs[r], err = g.Open(r, cpuAllocator(t, 0, nil), symheap.Options{Timeout: timeout})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, hs[r].Close()) })
	}
	return hs
}

// A two-stage hand-off captured once per rank and replayed with fresh
// inputs: rank 0 writes its input, puts it into rank 1's heap and signals;
// rank 1 waits for the signal and reads what arrived. Every replay moves
// that replay's input: the slot counts across replays, nothing is reset.
func TestPutSignalCapturedAndReplayed(t *testing.T) {
	hs := rankHeaps(t, 2, 5*time.Second)
	const n = 1024
	x, err := hs[0].Alloc(n)
	require.NoError(t, err)
	_, err = hs[1].Alloc(n) // the same sequence on both ranks: x is the same place
	require.NoError(t, err)
	in, err := hs[0].Allocator().HostAlloc(n)
	require.NoError(t, err)
	defer in.Close()
	out, err := hs[1].Allocator().HostAlloc(n)
	require.NoError(t, err)
	defer out.Close()

	send, err := hs[0].Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return errors.Join(hs[0].Write(x, in, 0), hs[0].Put(1, x, x), hs[0].Signal(1, 3, 1))
	})
	require.NoError(t, err)
	defer send.Close()
	recv, err := hs[1].Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return errors.Join(hs[1].WaitSignal(3, 1), hs[1].Read(out, 0, x))
	})
	require.NoError(t, err)
	defer recv.Close()

	for k := range 6 {
		for i := range in.Bytes() {
			in.Bytes()[i] = byte(i*7 + k*31)
		}
		var wg sync.WaitGroup
		var errs [2]error
		for r, g := range []*alloc.Graph{send, recv} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := g.Launch(); err != nil {
					errs[r] = err
					return
				}
				errs[r] = hs[r].Synchronize()
			}()
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs[:]...), "replay %d", k)
		require.Equal(t, in.Bytes(), out.Bytes(), "replay %d: rank 1 got rank 0's fresh input", k)
	}
}

// A peer that never signals: the wait fails at the timeout with
// ErrCollectiveTimeout naming the slot, the heap is broken, and later
// work is refused with the failure; nothing hangs.
func TestWaitSignalWithoutSignalTimesOut(t *testing.T) {
	hs := rankHeaps(t, 2, 150*time.Millisecond)
	x, err := hs[1].Alloc(64)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, hs[1].WaitSignal(5, 1))
	err = hs[1].Synchronize()
	require.ErrorIs(t, err, symheap.ErrCollectiveTimeout)
	require.Contains(t, err.Error(), "signal slot 5")
	require.Less(t, time.Since(start), 5*time.Second)
	require.ErrorIs(t, hs[1].Err(), symheap.ErrCollectiveTimeout)
	require.ErrorIs(t, hs[1].Put(0, x, x), symheap.ErrCollectiveTimeout, "a broken heap refuses work")
}

// Bad operands are typed and queue nothing.
func TestPutSignalBadOperands(t *testing.T) {
	hs := rankHeaps(t, 2, time.Second)
	x, err := hs[0].Alloc(64)
	require.NoError(t, err)
	y, err := hs[0].Alloc(128)
	require.NoError(t, err)
	require.ErrorIs(t, hs[0].Put(2, x, x), alloc.ErrInvalidValue)
	require.ErrorIs(t, hs[0].Put(-1, x, x), alloc.ErrInvalidValue)
	require.ErrorIs(t, hs[0].Put(1, x, y), alloc.ErrInvalidSize)
	require.ErrorIs(t, hs[0].Put(1, symheap.Tensor{Off: 1 << 16, Size: 64}, x), alloc.ErrOutOfRange)
	require.ErrorIs(t, hs[0].Signal(1, symheap.SignalSlots, 1), alloc.ErrInvalidValue)
	require.ErrorIs(t, hs[0].Signal(7, 0, 1), alloc.ErrInvalidValue)
	require.ErrorIs(t, hs[0].WaitSignal(-1, 1), alloc.ErrInvalidValue)
	require.NoError(t, hs[0].Synchronize())
}
