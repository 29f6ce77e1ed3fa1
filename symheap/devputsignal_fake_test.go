package symheap_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/symheap"
)

// Put, Signal and WaitSignal on the device heap over both fake runtimes
// (the kernels compiled for the host, every access checked): a captured
// hand-off through every slot, replayed with fresh inputs; a peer that
// never signals, or signals fewer times than a replayed wait; bad
// operands.

// slotChunk is what rank 0 puts per slot: its part of x.
const slotChunk = 256

// A hand-off through every slot, two ranks on two devices: rank 0 writes
// its input, puts chunk k into rank 1's heap and signals slot k with k+1
// for every k; rank 1 waits on every slot for k+1 and reads what arrived.
// Run eagerly, then captured once per rank and replayed with fresh
// inputs: every replay moves that replay's input, and rank 1's pad counts
// what every signal added and every wait consumed (nothing reset).
func TestFakePutSignalEverySlotReplayed(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		t.Setenv(v.env+"DEVICES", "2")
		w := openTopoOK(t, v, []int{0, 1}, 20*time.Second, nil)
		const n = symheap.SignalSlots * slotChunk
		var x symheap.Tensor
		for _, h := range w.heaps {
			var err error
			x, err = h.Alloc(n)
			require.NoError(t, err)
		}
		chunk := func(k int) symheap.Tensor { return symheap.Tensor{Off: x.Off + int64(k*slotChunk), Size: slotChunk} }
		in, err := w.as[0].HostAlloc(n)
		require.NoError(t, err)
		defer in.Close()
		out, err := w.as[1].HostAlloc(n)
		require.NoError(t, err)
		defer out.Close()
		steps := []func() error{
			func() error {
				h := w.heaps[0]
				err := h.Write(x, in, 0)
				for k := range symheap.SignalSlots {
					err = errors.Join(err, h.Put(1, chunk(k), chunk(k)), h.Signal(1, k, uint32(k+1)))
				}
				return err
			},
			func() error {
				h := w.heaps[1]
				var err error
				for k := range symheap.SignalSlots {
					err = errors.Join(err, h.WaitSignal(k, uint32(k+1)))
				}
				return errors.Join(err, h.Read(out, 0, x))
			},
		}
		round := func(k int, run func(r int) error) {
			for i := range in.Bytes() {
				in.Bytes()[i] = byte(i*7 + k*31 + 1)
			}
			clear(out.Bytes())
			w.must(t, func(r int) error {
				if err := run(r); err != nil {
					return err
				}
				return w.heaps[r].Synchronize()
			})
			require.Equal(t, in.Bytes(), out.Bytes(), "round %d: rank 1 got rank 0's fresh input through every slot", k)
		}
		round(0, func(r int) error { return steps[r]() })
		graphs := make([]*alloc.Graph, 2)
		w.must(t, func(r int) (err error) {
			graphs[r], err = w.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, steps[r])
			return err
		})
		defer func() {
			for _, g := range graphs {
				require.NoError(t, g.Close())
			}
		}()
		const replays = 4
		for k := 1; k <= replays; k++ {
			round(k, func(r int) error { return graphs[r].Launch() })
		}
		pad := make([]byte, kernels.PadBytes)
		require.NoError(t, w.as[1].Download(pad, w.heaps[1].Buffer(), 0))
		for k := range symheap.SignalSlots {
			at := kernels.PadSignalsOff + k*kernels.SignalSlotBytes
			want := uint32((k + 1) * (1 + replays))
			require.Equal(t, want, binary.LittleEndian.Uint32(pad[at+kernels.SignalCountOff:]), "slot %d's count", k)
			require.Equal(t, want, binary.LittleEndian.Uint32(pad[at+kernels.SignalConsumedOff:]), "slot %d's consumed", k)
		}
		lines := log.Lines()
		for _, k := range []string{kernels.Put, kernels.Signal, kernels.WaitSignal} {
			require.NotEmpty(t, gpurttest.Find(lines, v.launch+" kernel="+k+" "), "%s ran as a kernel", k)
		}
		for _, h := range w.heaps {
			require.NoError(t, h.Err())
		}
	})
}

// A peer that never signals: the wait gives up at the heap's timeout and
// Synchronize reports ErrCollectiveTimeout naming the slot and the
// counts; the heap is broken and refuses later work; nothing hangs. The
// peer's heap is untouched.
func TestFakeWaitSignalWithoutSignalTimesOut(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, _ *gpurttest.Log) {
		w := openTopoOK(t, v, []int{0, 0}, time.Second, nil)
		h := w.heaps[1]
		x, err := h.Alloc(64)
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, h.WaitSignal(symheap.SignalSlots-1, 3))
		err = h.Synchronize()
		require.ErrorIs(t, err, symheap.ErrCollectiveTimeout)
		require.Contains(t, err.Error(), fmt.Sprintf("rank 1 waited 1s on signal slot %d for a count of 3 (it is at 0)", symheap.SignalSlots-1))
		require.Less(t, time.Since(start), 15*time.Second)
		require.ErrorIs(t, h.Err(), symheap.ErrCollectiveTimeout)
		require.ErrorIs(t, h.Put(0, x, x), symheap.ErrCollectiveTimeout, "a broken heap refuses work")
		require.ErrorIs(t, h.WaitSignal(0, 1), symheap.ErrCollectiveTimeout)
		require.NoError(t, w.heaps[0].Synchronize())
	})
}

// One captured graph per rank, replayed: the signaller's twice, the
// waiter's three times. The first two replays of the wait pass (the
// counts carry over, nothing reset); the third waits for a signal that
// never comes and times out.
func TestFakeWaitSignalReplayedMoreThanSignalled(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, _ *gpurttest.Log) {
		w := openTopoOK(t, v, []int{0, 0}, time.Second, nil)
		graphs := make([]*alloc.Graph, 2)
		w.must(t, func(r int) (err error) {
			graphs[r], err = w.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
				if r == 0 {
					return w.heaps[0].Signal(1, 7, 2)
				}
				return w.heaps[1].WaitSignal(7, 2)
			})
			return err
		})
		defer func() {
			for _, g := range graphs {
				require.NoError(t, g.Close())
			}
		}()
		for k := range 2 {
			w.must(t, func(r int) error {
				if err := graphs[r].Launch(); err != nil {
					return err
				}
				return w.heaps[r].Synchronize()
			})
			require.NoError(t, w.heaps[1].Err(), "replay %d", k)
		}
		require.NoError(t, graphs[1].Launch())
		err := w.heaps[1].Synchronize()
		require.ErrorIs(t, err, symheap.ErrCollectiveTimeout)
		require.Contains(t, err.Error(), "signal slot 7 for a count of 6 (it is at 4)")
	})
}

// Bad operands are typed errors and launch nothing.
func TestFakePutSignalBadOperands(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		w := openTopoOK(t, v, []int{0, 0}, 5*time.Second, nil)
		h := w.heaps[0]
		x, err := h.Alloc(64)
		require.NoError(t, err)
		y, err := h.Alloc(128)
		require.NoError(t, err)
		before := len(gpurttest.Find(log.Lines(), v.launch))
		require.ErrorIs(t, h.Put(2, x, x), alloc.ErrInvalidValue)
		require.ErrorIs(t, h.Put(-1, x, x), alloc.ErrInvalidValue)
		require.ErrorIs(t, h.Put(1, x, y), alloc.ErrInvalidSize)
		require.ErrorIs(t, h.Put(1, symheap.Tensor{Off: 1 << 20, Size: 64}, x), alloc.ErrOutOfRange)
		require.ErrorIs(t, h.Signal(1, symheap.SignalSlots, 1), alloc.ErrInvalidValue)
		require.ErrorIs(t, h.Signal(2, 0, 1), alloc.ErrInvalidValue)
		require.ErrorIs(t, h.WaitSignal(-1, 1), alloc.ErrInvalidValue)
		require.ErrorIs(t, h.WaitSignal(symheap.SignalSlots, 1), alloc.ErrInvalidValue)
		require.NoError(t, h.Synchronize())
		require.Len(t, gpurttest.Find(log.Lines(), v.launch), before, "nothing launched")
	})
}

// A wait that sees a rank's closed mark appear in its pad while it waits
// (what a peer's Close writes, into the pads of the ranks of other
// processes too) stops then, with ErrPeerClosed naming that rank, instead
// of waiting out the timeout. The mark is written here by a driver of its
// own while the wait spins: the fakes run an eager launch in the
// launching thread, holding the rank's allocator, so a Close from a rank
// of this process would wait for the kernel before it could mark.
func TestFakeWaitSignalStopsAtAClosedMark(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, _ *gpurttest.Log) {
		const timeout = 20 * time.Second
		w := openTopoOK(t, v, []int{0, 0}, timeout, nil)
		d, err := v.open(0)
		require.NoError(t, err)
		defer d.Close()
		start := time.Now()
		waited := make(chan error, 1)
		go func() {
			if err := w.heaps[1].WaitSignal(2, 1); err != nil {
				waited <- err
				return
			}
			waited <- w.heaps[1].Synchronize()
		}()
		time.Sleep(300 * time.Millisecond) // the wait is spinning
		mark := w.heaps[1].Buffer().Ptr() + driver.DevicePtr(kernels.PadClosedOff+4*0)
		st, err := d.CreateStream()
		require.NoError(t, err)
		defer d.DestroyStream(st)
		require.NoError(t, d.CopyHtoD(mark, []byte{1, 0, 0, 0}, st))
		err = <-waited
		require.ErrorIs(t, err, symheap.ErrPeerClosed)
		require.ErrorContains(t, err, "rank 0 closed its heap")
		require.Less(t, time.Since(start), timeout/2, "the wait stopped when it saw the mark")
	})
}

// A put to a tensor at odd offsets (a hand-written Tensor, any byte) moves
// its bytes in the widest accesses the addresses allow: no misaligned
// access (which the fakes fail, as a GPU faults), every byte in place.
func TestFakePutOddOffsets(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, _ *gpurttest.Log) {
		w := openTopoOK(t, v, []int{0, 0}, 5*time.Second, nil)
		for _, h := range w.heaps {
			_, err := h.Alloc(4096)
			require.NoError(t, err)
		}
		src := make([]byte, 4096)
		for i := range src {
			src[i] = byte(i*13 + 1)
		}
		require.NoError(t, w.as[0].Upload(w.heaps[0].Buffer(), symheap.SignalPadBytes, src))
		for _, c := range []struct{ dst, src, n int64 }{{1, 3, 37}, {2, 6, 130}, {4, 20, 300}, {17, 1, 1000}} {
			d, s := symheap.Tensor{Off: 2048 + c.dst, Size: c.n}, symheap.Tensor{Off: c.src, Size: c.n}
			require.NoError(t, w.heaps[0].Put(1, d, s))
			require.NoError(t, w.heaps[0].Synchronize(), "%+v", c)
			got := make([]byte, c.n)
			require.NoError(t, w.as[1].Download(got, w.heaps[1].Buffer(), symheap.SignalPadBytes+d.Off))
			require.Equal(t, src[c.src:c.src+c.n], got, "%+v", c)
		}
	})
}
