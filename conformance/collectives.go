package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

// collectivesGroup: the symmetric heap's collectives on the backend, ranks
// as goroutines on one driver each, through the one interface engines use
// (symheap.Collectives): the host heap (symheap.Group: host functions, on
// backends whose memory the host reaches) and the device heap
// (symheap.OpenDevice: this library's kernels, on backends with IPC
// memory and kernels: cuda, hip). Each collective is captured once per
// rank and replayed with fresh per-rank inputs, compared with a reference
// every time; a rank that replays fewer times makes its peer time out
// instead of hanging. A backend that cannot run a kind must refuse it
// with errors.ErrUnsupported.
func (s *suite) collectivesGroup(t *testing.T) {
	for _, k := range heapKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Run("eager_and_captured", func(t *testing.T) { s.collectivesEagerAndCaptured(t, k) })
			t.Run("reductions", func(t *testing.T) { s.reductions(t, k) })
			t.Run("negative_zero", func(t *testing.T) { s.negativeZero(t, k) })
			t.Run("skewed_replays_time_out", func(t *testing.T) { s.skewedReplaysTimeOut(t, k) })
			t.Run("mismatch_is_named", func(t *testing.T) { s.mismatchIsNamed(t, k) })
			t.Run("bad_operands", func(t *testing.T) { s.badCollectiveOperands(t, k) })
			t.Run("stress_replays", func(t *testing.T) { s.stressReplays(t, k) })
			t.Run("odd_layouts", func(t *testing.T) { s.oddLayouts(t, k) })
			t.Run("put_signal", func(t *testing.T) { s.putSignal(t, k) })
			t.Run("copy_engine", func(t *testing.T) { s.copyEngine(t, k) })
			t.Run("all_to_all_v", func(t *testing.T) { s.allToAllV(t, k) })
		})
	}
	t.Run("peers_at_different_addresses", s.peersAtDifferentAddresses)
	t.Run("alloc_mismatch_is_loud", s.allocMismatchIsLoud)
	t.Run("heap_capture_rules", s.heapCaptureRules)
	t.Run("device_heap_copy", s.deviceHeap)
	t.Run("device_heap_lifetime", s.deviceHeapLifetime)
	t.Run("ranks_share_a_driver", s.ranksShareADriver)
}

// heapKind is one implementation of symheap.Collectives.
type heapKind struct {
	name string
	open func(s *suite, t *testing.T, n int, size int64, timeout time.Duration, checkAllocs bool) (*world, bool)
}

var heapKinds = []heapKind{
	{"heap", (*suite).newHostWorld},
	{"device_heap", (*suite).newDeviceWorld},
}

// everyDType is every element type the heaps' collectives take: the
// cells that must hold for each run over all of them.
var everyDType = []symheap.DType{symheap.Float32, symheap.Int32, symheap.Float16, symheap.BFloat16}

// world is n ranks as goroutines, each on its own driver (ranks are
// devices) and allocator.
type world struct {
	heaps  []symheap.Collectives
	host   []*symheap.Heap // the host heaps, for the cells that read them directly
	closed []bool          // closed by the test itself: the cleanup skips them
}

// closeAll closes every rank's heap the test did not close, in parallel
// (a device heap's Close is collective).
func (w *world) closeAll(t *testing.T) {
	for r, err := range w.each(func(r int, h symheap.Collectives) error {
		if w.closed[r] {
			return nil
		}
		return h.Close()
	}) {
		require.NoError(t, err, "closing rank %d", r)
	}
}

// newHostWorld opens the host heap of one group for n ranks. ok is false,
// with the refusal checked, when the backend cannot run it (a plugin
// cannot ship host functions; a GPU's memory is not the host's), or cannot
// run two ranks in one process (cuda on an integrated GPU: see
// symheap.OneRankPerProcess; TestCollectivesAcrossProcesses runs them).
func (s *suite) newHostWorld(t *testing.T, n int, size int64, timeout time.Duration, checkAllocs bool) (w *world, ok bool) {
	t.Helper()
	return s.newHostWorldOn(t, n, size, timeout, checkAllocs, func(int) driver.Driver { return s.openDriver(t) })
}

// newHostWorldOn is newHostWorld with rank r's allocator on drvOf(r).
func (s *suite) newHostWorldOn(t *testing.T, n int, size int64, timeout time.Duration, checkAllocs bool, drvOf func(r int) driver.Driver) (w *world, ok bool) {
	t.Helper()
	g, err := symheap.NewGroup(n, size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	w = &world{}
	for r := range n {
		d := drvOf(r)
		a, err := alloc.New(d, alloc.Options{Watchdog: testWatchdog})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, a.Close()) })
		h, err := g.Open(r, a, symheap.Options{Timeout: timeout, CheckAllocs: checkAllocs})
		if errors.Is(err, errors.ErrUnsupported) {
			_, launches := d.(driver.HostFuncLauncher)
			runs := launches && a.Info().UnifiedMemory
			require.False(t, runs && (r == 0 || !symheap.OneRankPerProcess(d)), "a backend that can run collectives refused them: %v", err)
			t.Logf("refused, as it must be on this backend: %v", err)
			return nil, false
		}
		require.NoError(t, err)
		w.heaps = append(w.heaps, h)
		w.host = append(w.host, h)
		w.closed = append(w.closed, false)
	}
	t.Cleanup(func() { w.closeAll(t) })
	return w, true
}

// newDeviceWorld opens a device heap for n goroutine ranks through a
// local exchange. ok is false, with the refusal checked, where the
// backend has no IPC memory (cpu, plugins) or runs no kernels of ours.
func (s *suite) newDeviceWorld(t *testing.T, n int, size int64, timeout time.Duration, _ bool) (w *world, ok bool) {
	t.Helper()
	as := make([]*alloc.Allocator, n)
	for r := range n {
		a, err := alloc.New(s.openDriver(t), alloc.Options{Watchdog: testWatchdog})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, a.Close()) })
		as[r] = a
	}
	if !symheap.DeviceRuns(as[0].Driver()) {
		_, err := symheap.OpenDevice(0, as[0], symheap.NewLocalExchange(n), size, symheap.DeviceOptions{Timeout: timeout})
		require.ErrorIs(t, err, errors.ErrUnsupported)
		t.Logf("no device heap on this backend, refused as it must be: %v", err)
		return nil, false
	}
	x := symheap.NewLocalExchange(n)
	heaps := make([]*symheap.DeviceHeap, n)
	for r, err := range parallelEach(n, func(r int) (err error) {
		heaps[r], err = symheap.OpenDevice(r, as[r], x, size, symheap.DeviceOptions{Timeout: timeout})
		return err
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	w = &world{closed: make([]bool, n)}
	for _, h := range heaps {
		w.heaps = append(w.heaps, h)
	}
	t.Cleanup(func() { w.closeAll(t) })
	if err := heaps[0].CollectivesRun(); err != nil {
		require.ErrorIs(t, err, errors.ErrUnsupported)
		_, kl := as[0].Driver().(driver.KernelLauncher)
		require.False(t, kl, "the driver loads kernels, yet the device heap has no collectives: %v", err)
		t.Logf("no kernels of ours on this backend, refused as it must be: %v", err)
		return nil, false
	}
	return w, true
}

// each runs fn for every rank, each in its own goroutine, and returns the
// ranks' errors.
func (w *world) each(fn func(r int, h symheap.Collectives) error) []error {
	return parallelEach(len(w.heaps), func(r int) error { return fn(r, w.heaps[r]) })
}

// parallelEach runs fn for 0..n-1, each in its own goroutine, and returns
// their errors, in order.
func parallelEach(n int, fn func(r int) error) []error { return ranks.Each(n, fn) }

func (w *world) must(t *testing.T, fn func(r int, h symheap.Collectives) error) {
	t.Helper()
	for r, err := range w.each(fn) {
		require.NoError(t, err, "rank %d", r)
	}
}

// alloc makes the same allocation on every rank (as ranks must).
func (w *world) alloc(t *testing.T, n int64) symheap.Tensor {
	t.Helper()
	var ts []symheap.Tensor
	for _, h := range w.heaps {
		x, err := h.Alloc(n)
		require.NoError(t, err)
		ts = append(ts, x)
	}
	for _, x := range ts {
		require.Equal(t, ts[0], x, "the same sequence gives the same offsets on every rank")
	}
	return ts[0]
}

// rankIO is one rank's pinned staging for a step: the captured step writes
// in into the heap at its start and reads the result into out at its end,
// so a replay moves the bytes as they are then; zero poisons the input.
type rankIO struct {
	in, out, zero *alloc.HostBuffer
}

func newRankIO(a *alloc.Allocator, in, out int64) (*rankIO, error) {
	var io rankIO
	var err error
	if io.in, err = a.HostAlloc(in); err != nil {
		return nil, err
	}
	if io.zero, err = a.HostAlloc(in); err != nil {
		return nil, errors.Join(err, io.close())
	}
	if io.out, err = a.HostAlloc(out); err != nil {
		return nil, errors.Join(err, io.close())
	}
	clear(io.zero.Bytes())
	return &io, nil
}

func (io *rankIO) close() error {
	var errs []error
	for _, b := range []*alloc.HostBuffer{io.in, io.out, io.zero} {
		if b != nil {
			errs = append(errs, b.Close())
		}
	}
	return errors.Join(errs...)
}

// collective is one collective with the host-side reference it must match,
// usable by goroutine ranks (one process holds every heap) and process
// ranks (one heap each).
type collective struct {
	name string
	// sizes are the bytes of in and out over n ranks.
	sizes func(n int) (in, out int64)
	// launch enqueues the collective; inPlace: its result is in in.
	launch  func(h symheap.Collectives, in, out symheap.Tensor) error
	inPlace bool
	// want is element i of rank r's out in round k.
	want func(n, r, k, i int) int32
}

const elems = 1000 // per chunk

func val(r, k, i int) int32 { return int32(1000*r + 7*k + i%97) }

func sumOver(n, k, i int) (s int32) {
	for p := range n {
		s += val(p, k, i)
	}
	return s
}

func collectives() []*collective {
	chunk := int64(elems * 4)
	return []*collective{
		{
			name:    "all_reduce",
			sizes:   func(n int) (int64, int64) { return chunk, chunk },
			launch:  func(h symheap.Collectives, in, _ symheap.Tensor) error { return h.AllReduce(in, symheap.Int32) },
			inPlace: true,
			want:    func(n, _, k, i int) int32 { return sumOver(n, k, i) },
		},
		{
			name:   "all_gather",
			sizes:  func(n int) (int64, int64) { return chunk, int64(n) * chunk },
			launch: func(h symheap.Collectives, in, out symheap.Tensor) error { return h.AllGather(in, out) },
			want:   func(_, _, k, i int) int32 { return val(i/elems, k, i%elems) },
		},
		{
			name:  "reduce_scatter",
			sizes: func(n int) (int64, int64) { return int64(n) * chunk, chunk },
			launch: func(h symheap.Collectives, in, out symheap.Tensor) error {
				return h.ReduceScatter(in, out, symheap.Int32)
			},
			want: func(n, r, k, i int) int32 { return sumOver(n, k, r*elems+i) },
		},
		{
			name:   "all_to_all",
			sizes:  func(n int) (int64, int64) { return int64(n) * chunk, int64(n) * chunk },
			launch: func(h symheap.Collectives, in, out symheap.Tensor) error { return h.AllToAll(in, out) },
			want:   func(_, r, k, i int) int32 { return val(i/elems, k, r*elems+i%elems) },
		},
	}
}

// setup allocates the collective's tensors with alloc (the same on every
// rank) and the rank's staging buffers on a.
func (c *collective) setup(n int, a *alloc.Allocator, alloc func(int64) (symheap.Tensor, error)) (in, out symheap.Tensor, io *rankIO, err error) {
	ni, no := c.sizes(n)
	if in, err = alloc(ni); err != nil {
		return
	}
	if out, err = alloc(no); err != nil {
		return
	}
	io, err = newRankIO(a, ni, no)
	return
}

// step enqueues one step: write the inputs, the collective, (in place:
// copy the result out), poison the inputs right after the collective, and
// read the result. A rank that left the collective while a peer still
// read its inputs (no trailing barrier) would hand that peer the poison.
func (c *collective) step(h symheap.Collectives, io *rankIO, in, out symheap.Tensor) error {
	if err := h.Write(in, io.in, 0); err != nil {
		return err
	}
	if err := c.launch(h, in, out); err != nil {
		return err
	}
	if c.inPlace {
		if err := h.CopyLocal(out, in); err != nil {
			return err
		}
	}
	if err := h.Write(in, io.zero, 0); err != nil {
		return err
	}
	return h.Read(io.out, 0, out)
}

// fill writes rank r's inputs of round k into its staging.
func (c *collective) fill(io *rankIO, r, k int) {
	b := io.in.Bytes()
	for i := range len(b) / 4 {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(val(r, k, i)))
	}
	clear(io.out.Bytes())
}

// verify compares rank r's result of round k with the reference.
func (c *collective) verify(io *rankIO, n, r, k int) error {
	b := io.out.Bytes()
	for i := range len(b) / 4 {
		if got, want := int32(binary.LittleEndian.Uint32(b[4*i:])), c.want(n, r, k, i); got != want {
			return fmt.Errorf("%s: rank %d round %d: element %d is %d, want %d", c.name, r, k, i, got, want)
		}
	}
	return nil
}

func (s *suite) collectivesEagerAndCaptured(t *testing.T, kind heapKind) {
	const n, replays = 4, 5
	for _, c := range collectives() {
		t.Run(c.name, func(t *testing.T) {
			w, ok := kind.open(s, t, n, 1<<20, 10*time.Second, true)
			if !ok {
				return
			}
			ins, outs, ios := make([]symheap.Tensor, n), make([]symheap.Tensor, n), make([]*rankIO, n)
			for r, h := range w.heaps {
				var err error
				ins[r], outs[r], ios[r], err = c.setup(n, h.Allocator(), h.Alloc)
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, ios[r].close()) })
				require.Equal(t, ins[0], ins[r], "the same sequence gives the same offsets on every rank")
			}
			// Eager.
			w.must(t, func(r int, h symheap.Collectives) error {
				c.fill(ios[r], r, 0)
				if err := c.step(h, ios[r], ins[r], outs[r]); err != nil {
					return err
				}
				return h.Synchronize()
			})
			for r := range n {
				require.NoError(t, c.verify(ios[r], n, r, 0))
			}
			// Captured once per rank, replayed with fresh data.
			graphs := make([]*alloc.Graph, n)
			w.must(t, func(r int, h symheap.Collectives) error {
				g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
					return c.step(h, ios[r], ins[r], outs[r])
				})
				graphs[r] = g
				return err
			})
			for k := 1; k <= replays; k++ {
				w.must(t, func(r int, h symheap.Collectives) error {
					c.fill(ios[r], r, k)
					if err := graphs[r].Launch(); err != nil {
						return err
					}
					return h.Synchronize()
				})
				for r := range n {
					require.NoError(t, c.verify(ios[r], n, r, k))
				}
			}
			for _, g := range graphs {
				require.NoError(t, g.Close())
			}
		})
	}
}

// A rank that replays fewer times than its peer makes the peer fail with
// ErrCollectiveTimeout, at the timeout, reported by its Synchronize; the
// heap stays broken and refuses the next collective.
func (s *suite) skewedReplaysTimeOut(t *testing.T, kind heapKind) {
	const timeout = 200 * time.Millisecond
	w, ok := kind.open(s, t, 2, 1<<16, timeout, false)
	if !ok {
		return
	}
	graphs := make([]*alloc.Graph, 2)
	w.must(t, func(r int, h symheap.Collectives) error {
		g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, h.Barrier)
		graphs[r] = g
		return err
	})
	replays := []int{2, 1}
	start := time.Now()
	errs := w.each(func(r int, h symheap.Collectives) error {
		for range replays[r] {
			if err := graphs[r].Launch(); err != nil {
				return err
			}
			if err := h.Synchronize(); err != nil {
				return err
			}
		}
		return nil
	})
	require.ErrorIs(t, errs[0], symheap.ErrCollectiveTimeout, "the rank that replayed more waits in vain")
	require.NoError(t, errs[1])
	require.Less(t, time.Since(start), timeout+2*time.Second, "bounded by the timeout")
	require.ErrorIs(t, w.heaps[0].Err(), symheap.ErrCollectiveTimeout, "the heap stays broken")
	require.ErrorIs(t, w.heaps[0].Barrier(), symheap.ErrCollectiveTimeout, "a broken heap refuses collectives")
	for _, g := range graphs {
		require.NoError(t, g.Close())
	}
}

// mismatchIsNamed: ranks that meet in different collectives both fail
// with symheap.ErrCollectiveMismatch naming both collectives and both
// ranks, at the first barrier they share and well before the timeout
// (before, each case "succeeded" on at least one rank with wrong bytes, or
// timed out on one and passed on the other); the heap stays broken.
// Matched collectives on a fresh world pass (every other cell).
func (s *suite) mismatchIsNamed(t *testing.T, kind heapKind) {
	const n, chunk, timeout = 2, 4096, 5 * time.Second
	for _, c := range []struct {
		name  string
		names [n]string // in each rank's error, both
		run   [n]func(h symheap.Collectives, x, y symheap.Tensor) error
	}{
		{"all_gather_vs_reduce_scatter", [n]string{"AllGather of 4096 B", "ReduceScatter of 1024 float32"}, [n]func(h symheap.Collectives, x, y symheap.Tensor) error{
			func(h symheap.Collectives, x, y symheap.Tensor) error { return h.AllGather(y, x) },
			func(h symheap.Collectives, x, y symheap.Tensor) error { return h.ReduceScatter(x, y, symheap.Float32) },
		}},
		{"one_shot_vs_two_shot", [n]string{"AllReduce (one-shot) of 2048 float32", "AllReduce (two-shot) of 2048 float32"}, [n]func(h symheap.Collectives, x, y symheap.Tensor) error{
			func(h symheap.Collectives, x, _ symheap.Tensor) error {
				return h.AllReduceWith(x, symheap.Float32, symheap.OneShot)
			},
			func(h symheap.Collectives, x, _ symheap.Tensor) error {
				return h.AllReduceWith(x, symheap.Float32, symheap.TwoShot)
			},
		}},
		{"kernel_vs_copy_engine", [n]string{"AllGather of 4096 B", "AllGather (copy engine) of 4096 B"}, [n]func(h symheap.Collectives, x, y symheap.Tensor) error{
			func(h symheap.Collectives, x, y symheap.Tensor) error { return h.AllGatherWith(y, x, symheap.Kernel) },
			func(h symheap.Collectives, x, y symheap.Tensor) error {
				return h.AllGatherWith(y, x, symheap.CopyEngine)
			},
		}},
		{"epoch_ahead_on_one_rank", [n]string{"Barrier", "AllReduce (one-shot) of 2048 float32"}, [n]func(h symheap.Collectives, x, y symheap.Tensor) error{
			func(h symheap.Collectives, x, _ symheap.Tensor) error {
				if err := h.Barrier(); err != nil { // one collective more than rank 1
					return err
				}
				return h.AllReduce(x, symheap.Float32)
			},
			func(h symheap.Collectives, x, _ symheap.Tensor) error { return h.AllReduce(x, symheap.Float32) },
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, ok := kind.open(s, t, n, 1<<16, timeout, false)
			if !ok {
				return
			}
			x := w.alloc(t, n*chunk)
			y := w.alloc(t, chunk)
			start := time.Now()
			errs := w.each(func(r int, h symheap.Collectives) error {
				if err := c.run[r](h, x, y); err != nil {
					return err
				}
				return h.Synchronize()
			})
			require.Less(t, time.Since(start), timeout, "found where the ranks met, not by a timeout")
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				require.ErrorIs(t, err, symheap.ErrCollectiveMismatch, "rank %d", r)
				for _, want := range []string{"rank 0", "rank 1", c.names[0], c.names[1]} {
					require.Contains(t, err.Error(), want, "rank %d", r)
				}
				require.ErrorIs(t, w.heaps[r].Err(), symheap.ErrCollectiveMismatch, "rank %d: the heap stays broken", r)
				require.ErrorIs(t, w.heaps[r].Barrier(), symheap.ErrCollectiveMismatch, "rank %d: a broken heap refuses collectives", r)
			}
		})
	}
}

func (s *suite) allocMismatchIsLoud(t *testing.T) {
	w, ok := s.newHostWorld(t, 2, 1<<16, 5*time.Second, true)
	if !ok {
		return
	}
	_, err := w.heaps[0].Alloc(100)
	require.NoError(t, err)
	_, err = w.heaps[1].Alloc(200)
	require.NoError(t, err)
	errs := w.each(func(r int, h symheap.Collectives) error {
		if err := h.Barrier(); err != nil {
			return err
		}
		return h.Synchronize()
	})
	for r, err := range errs {
		require.ErrorIs(t, err, symheap.ErrAllocMismatch, "rank %d", r)
	}
}

// Peers map each heap at their own addresses: offsets, not pointers, name
// the same bytes.
func (s *suite) peersAtDifferentAddresses(t *testing.T) {
	w, ok := s.newHostWorld(t, 2, 1<<16, 0, false)
	if !ok {
		return
	}
	x := w.alloc(t, 64)
	b0, b1 := w.host[0].Bytes(x), w.host[1].Bytes(x)
	require.NotEqual(t, fmt.Sprintf("%p", &b0[0]), fmt.Sprintf("%p", &b1[0]))
}

// reductions: all-reduce of every element type by every algorithm, and
// reduce-scatter of the halves, against sums computed here in rank order
// (every rank must get the same bits). Values are small multiples of 1/4,
// so float sums are exact; the halves' rounding is checked where a sum is
// not representable (1 + 2^-11 + ... in float16, tested by the
// conversion tests of symheap).
func (s *suite) reductions(t *testing.T, kind heapKind) {
	const n = 3
	w, ok := kind.open(s, t, n, 1<<22, 10*time.Second, false)
	if !ok {
		return
	}
	// 1 pack, a partial pack, several rounds of packs, past the one-shot limit.
	for _, count := range []int{4, 1001, 70000} {
		for _, dt := range everyDType {
			for _, alg := range []symheap.Algorithm{symheap.Auto, symheap.OneShot, symheap.TwoShot} {
				t.Run(fmt.Sprintf("%s/%d/%s", dt, count, alg), func(t *testing.T) {
					reduceCase(t, w, n, count, dt, alg)
				})
			}
		}
	}
}

// negativeZero: a sum in rank order starts from rank 0's value, so where
// every rank holds -0 the sum is -0 (an accumulator started at +0 made it
// +0), and where one rank holds +0 it is +0 (IEEE: -0 + +0 = +0). Every
// float type, both all-reduce algorithms and reduce-scatter, whole packs
// (the device heap's aligned variants) and a partial pack at the end.
func (s *suite) negativeZero(t *testing.T, kind heapKind) {
	const n = 3
	w, ok := kind.open(s, t, n, 1<<20, 10*time.Second, false)
	if !ok {
		return
	}
	for _, count := range []int64{1000, 1001} {
		s.negativeZeroOf(t, w, n, count)
	}
}

func (s *suite) negativeZeroOf(t *testing.T, w *world, n int, count int64) {
	type op struct {
		name   string
		in     int64 // elements of in (out holds count)
		launch func(h symheap.Collectives, in, out symheap.Tensor, dt symheap.DType) error
	}
	ops := []op{
		{"all_reduce_one_shot", count, func(h symheap.Collectives, in, _ symheap.Tensor, dt symheap.DType) error {
			return h.AllReduceWith(in, dt, symheap.OneShot)
		}},
		{"all_reduce_two_shot", count, func(h symheap.Collectives, in, _ symheap.Tensor, dt symheap.DType) error {
			return h.AllReduceWith(in, dt, symheap.TwoShot)
		}},
		{"reduce_scatter", int64(n) * count, func(h symheap.Collectives, in, out symheap.Tensor, dt symheap.DType) error {
			return h.ReduceScatter(in, out, dt)
		}},
	}
	for _, dt := range []symheap.DType{symheap.Float32, symheap.Float16, symheap.BFloat16} {
		es := dt.Size()
		for _, o := range ops {
			for _, plusOn := range []int{-1, 1} { // the rank that holds +0 (-1: none)
				t.Run(fmt.Sprintf("%s/%s/%d/plus_zero_on_%d", dt, o.name, count, plusOn), func(t *testing.T) {
					in := w.alloc(t, o.in*es)
					out := in
					if o.in != count {
						out = w.alloc(t, count*es)
					}
					t.Cleanup(func() {
						for _, h := range w.heaps {
							require.NoError(t, h.Reset())
						}
					})
					ios := make([]*rankIO, n)
					for r, h := range w.heaps {
						io, err := newRankIO(h.Allocator(), in.Size, out.Size)
						require.NoError(t, err)
						t.Cleanup(func() { require.NoError(t, io.close()) })
						z := float32(math.Copysign(0, -1))
						if r == plusOn {
							z = 0
						}
						for i := range int(o.in) {
							encodeElem(dt, io.in.Bytes()[i*int(es):], z)
						}
						ios[r] = io
					}
					w.must(t, func(r int, h symheap.Collectives) error {
						if err := h.Write(in, ios[r].in, 0); err != nil {
							return err
						}
						if err := o.launch(h, in, out, dt); err != nil {
							return err
						}
						if err := h.Read(ios[r].out, 0, out); err != nil {
							return err
						}
						return h.Synchronize()
					})
					want := make([]byte, out.Size)
					wantZero := float32(math.Copysign(0, -1))
					if plusOn >= 0 {
						wantZero = 0
					}
					for i := range count {
						encodeElem(dt, want[i*es:], wantZero)
					}
					for r := range n {
						require.Equal(t, want, ios[r].out.Bytes(), "rank %d: every element must be %v", r, wantZero)
					}
				})
			}
		}
	}
}

// encodeElem writes v (a small multiple of 1/4) as dt.
func encodeElem(dt symheap.DType, b []byte, v float32) {
	switch dt {
	case symheap.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	case symheap.Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	case symheap.Float16:
		binary.LittleEndian.PutUint16(b, symheap.Float32ToF16(v))
	case symheap.BFloat16:
		binary.LittleEndian.PutUint16(b, symheap.Float32ToBF16(v))
	}
}

func reduceCase(t *testing.T, w *world, n, count int, dt symheap.DType, alg symheap.Algorithm) {
	es := int(dt.Size())
	size := int64(count * es)
	x := w.alloc(t, size)
	t.Cleanup(func() {
		for _, h := range w.heaps {
			require.NoError(t, h.Reset())
		}
	})
	// input of rank r, element i: exact in every type (bfloat16 holds 8
	// significant bits: |v| < 64 in steps of 1/4 fits).
	in := func(r, i int) float32 {
		v := float32((r*37+i*11)%61-30) / 4
		if dt == symheap.Int32 {
			v = float32((r*37+i*11)%61 - 30)
		}
		return v
	}
	ios := make([]*rankIO, n)
	for r, h := range w.heaps {
		io, err := newRankIO(h.Allocator(), size, size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, io.close()) })
		for i := range count {
			encodeElem(dt, io.in.Bytes()[i*es:], in(r, i))
		}
		ios[r] = io
	}
	w.must(t, func(r int, h symheap.Collectives) error {
		if err := h.Write(x, ios[r].in, 0); err != nil {
			return err
		}
		if err := h.AllReduceWith(x, dt, alg); err != nil {
			return err
		}
		if err := h.Read(ios[r].out, 0, x); err != nil {
			return err
		}
		return h.Synchronize()
	})
	want := make([]byte, size)
	for i := range count {
		var sum float32
		for p := range n {
			sum += in(p, i)
		}
		encodeElem(dt, want[i*es:], sum)
	}
	for r := range n {
		if got := ios[r].out.Bytes(); !bytes.Equal(got, want) {
			for i := 0; i < count; i++ {
				g, w := got[i*es:(i+1)*es], want[i*es:(i+1)*es]
				require.Equal(t, w, g, "rank %d: element %d of %d", r, i, count)
			}
		}
	}
}

// badCollectiveOperands: every refusal is typed and enqueues nothing. The
// bad calls are made on rank 0 only; a barrier of both ranks afterwards
// must then pass, which it would not if any of them had queued a
// collective (rank 0 would be an epoch ahead and wait in vain).
func (s *suite) badCollectiveOperands(t *testing.T, kind heapKind) {
	w, ok := kind.open(s, t, 2, 1<<16, 5*time.Second, false)
	if !ok {
		return
	}
	other, ok := kind.open(s, t, 1, 1<<16, 5*time.Second, false)
	require.True(t, ok)
	h := w.heaps[0]
	x := w.alloc(t, 4096)
	y := w.alloc(t, 8192)
	z := w.alloc(t, 6)
	foreign, err := other.heaps[0].Alloc(4096)
	require.NoError(t, err)
	outside := symheap.Tensor{Off: 1 << 16, Size: 16}
	half := symheap.Tensor{Off: x.Off, Size: x.Size / 2}
	hb, err := h.Allocator().HostAlloc(64)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, hb.Close()) })

	for _, c := range []struct {
		name string
		call func() error
		want error
	}{
		{"outside the heap", func() error { return h.AllReduce(outside, symheap.Float32) }, alloc.ErrOutOfRange},
		{"another group's tensor", func() error { return h.AllReduce(foreign, symheap.Float32) }, alloc.ErrInvalidValue},
		{"unknown element type", func() error { return h.AllReduce(x, symheap.DType(9)) }, alloc.ErrInvalidValue},
		{"partial element", func() error { return h.AllReduce(z, symheap.Float32) }, alloc.ErrInvalidSize},
		{"unknown algorithm", func() error { return h.AllReduceWith(x, symheap.Float32, symheap.Algorithm(7)) }, alloc.ErrInvalidValue},
		{"all-gather sizes", func() error { return h.AllGather(x, x) }, alloc.ErrInvalidSize},
		{"all-gather overlap", func() error { return h.AllGather(half, x) }, alloc.ErrInvalidValue},
		{"reduce-scatter sizes", func() error { return h.ReduceScatter(x, x, symheap.Int32) }, alloc.ErrInvalidSize},
		{"all-to-all sizes", func() error { return h.AllToAll(x, y) }, alloc.ErrInvalidSize},
		{"all-to-all overlap", func() error { return h.AllToAll(x, x) }, alloc.ErrInvalidValue},
		// The copy-engine variant checks as the kernels do.
		{"copy engine: all-gather sizes", func() error { return h.AllGatherWith(x, x, symheap.CopyEngine) }, alloc.ErrInvalidSize},
		{"copy engine: all-gather overlap", func() error { return h.AllGatherWith(half, x, symheap.CopyEngine) }, alloc.ErrInvalidValue},
		{"copy engine: outside the heap", func() error {
			return h.AllGatherWith(outside, symheap.Tensor{Off: x.Off, Size: 32}, symheap.CopyEngine)
		}, alloc.ErrOutOfRange},
		{"copy engine: all-to-all sizes", func() error { return h.AllToAllWith(x, y, symheap.CopyEngine) }, alloc.ErrInvalidSize},
		{"copy engine: all-to-all overlap", func() error { return h.AllToAllWith(x, x, symheap.CopyEngine) }, alloc.ErrInvalidValue},
		{"copy engine: another group's tensor", func() error { return h.AllToAllWith(foreign, x, symheap.CopyEngine) }, alloc.ErrInvalidValue},
		{"all-gather by one-shot", func() error { return h.AllGatherWith(half, y, symheap.OneShot) }, alloc.ErrInvalidValue},
		{"all-reduce by the copy engines", func() error { return h.AllReduceWith(x, symheap.Float32, symheap.CopyEngine) }, alloc.ErrInvalidValue},
		{"axpy sizes", func() error { return h.Axpy(x, y, 2) }, alloc.ErrInvalidSize},
		{"write past the host buffer", func() error { return h.Write(x, hb, 0) }, alloc.ErrOutOfRange},
		{"read from another group", func() error { return h.Read(hb, 0, foreign) }, alloc.ErrInvalidValue},
	} {
		require.ErrorIs(t, c.call(), c.want, c.name)
	}
	w.must(t, func(r int, h symheap.Collectives) error {
		if err := h.Barrier(); err != nil {
			return err
		}
		return h.Synchronize()
	})

	// A closed heap refuses everything with alloc.ErrClosed.
	require.NoError(t, other.heaps[0].Close())
	other.closed[0] = true
	require.ErrorIs(t, other.heaps[0].Barrier(), alloc.ErrClosed)
	require.ErrorIs(t, other.heaps[0].AllReduce(foreign, symheap.Float32), alloc.ErrClosed)
}
