package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// collectivesGroup: the symmetric heap's collectives on the backend, ranks
// as goroutines on one driver each. Each is captured once per rank and
// replayed with fresh per-rank inputs, compared with a reference every
// time; a rank that replays fewer times makes its peer time out instead of
// hanging. A backend that cannot run them must refuse with
// errors.ErrUnsupported.
func (s *suite) collectivesGroup(t *testing.T) {
	t.Run("eager_and_captured", s.collectivesEagerAndCaptured)
	t.Run("float32_all_reduce", s.float32AllReduce)
	t.Run("peers_at_different_addresses", s.peersAtDifferentAddresses)
	t.Run("skewed_replays_time_out", s.skewedReplaysTimeOut)
	t.Run("alloc_mismatch_is_loud", s.allocMismatchIsLoud)
	t.Run("heap_capture_rules", s.heapCaptureRules)
	t.Run("device_heap", s.deviceHeap)
	t.Run("ranks_share_a_driver", s.ranksShareADriver)
}

// world is n ranks as goroutines, each on its own cpu device (driver) and
// allocator, sharing one group.
type world struct {
	g     *symheap.Group
	heaps []*symheap.Heap
}

// newWorld opens one driver per rank (ranks are devices) and a heap on
// an allocator of each. ok is false, with the refusal checked, when the
// backend cannot run collectives (a plugin cannot ship host functions), or
// cannot run two ranks in one process (cuda on an integrated GPU: see
// symheap.OneRankPerProcess; TestCollectivesAcrossProcesses runs them).
func (s *suite) newWorld(t *testing.T, n int, size int64, opts symheap.Options) (w *world, ok bool) {
	t.Helper()
	return s.newWorldOn(t, n, size, opts, func(int) alloc.Driver { return s.openDriver(t) })
}

// newWorldOn is newWorld with rank r's allocator on driver(r).
func (s *suite) newWorldOn(t *testing.T, n int, size int64, opts symheap.Options, driver func(r int) alloc.Driver) (w *world, ok bool) {
	t.Helper()
	g, err := symheap.NewGroup(n, size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close()) })
	w = &world{g: g}
	for r := range n {
		d := driver(r)
		a, err := alloc.New(d, alloc.Options{Watchdog: testWatchdog})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, a.Close()) })
		h, err := g.Open(r, a, opts)
		if errors.Is(err, errors.ErrUnsupported) {
			_, launches := d.(alloc.HostFuncLauncher)
			runs := launches && a.Info().UnifiedMemory
			require.False(t, runs && (r == 0 || !symheap.OneRankPerProcess(d)), "a backend that can run collectives refused them: %v", err)
			t.Logf("refused, as it must be on this backend: %v", err)
			return nil, false
		}
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, h.Close()) })
		w.heaps = append(w.heaps, h)
	}
	return w, true
}

// each runs fn for every rank, each in its own goroutine, and returns the
// ranks' errors.
func (w *world) each(fn func(r int, h *symheap.Heap) error) []error {
	return parallelEach(len(w.heaps), func(r int) error { return fn(r, w.heaps[r]) })
}

// parallelEach runs fn for 0..n-1, each in its own goroutine, and returns
// their errors, in order.
func parallelEach(n int, fn func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r)
		}()
	}
	wg.Wait()
	return errs
}

func (w *world) must(t *testing.T, fn func(r int, h *symheap.Heap) error) {
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

// collective is one collective with the host-side reference it must match,
// usable by goroutine ranks (one process holds every heap) and process
// ranks (one heap each).
type collective struct {
	name string
	// setup allocates its tensors with alloc (the same on every rank);
	// launch enqueues it on a rank; fill writes rank r's inputs for round
	// k; verify compares rank r's output with the reference for round k;
	// poison overwrites the inputs after the collective.
	setup  func(alloc func(n int64) (symheap.Tensor, error)) error
	launch func(h *symheap.Heap) error
	fill   func(h *symheap.Heap, r, k int)
	verify func(h *symheap.Heap, r, k int) error
	poison func(h *symheap.Heap)
}

const elems = 1000 // per chunk

func val(r, k, i int) int32 { return int32(1000*r + 7*k + i%97) }

// setupWorld allocates the collective's tensors on every rank.
func (c *collective) setupWorld(t *testing.T, w *world) {
	t.Helper()
	require.NoError(t, c.setup(func(n int64) (symheap.Tensor, error) { return w.alloc(t, n), nil }))
}

// launchThenPoison enqueues the collective, then poisons this rank's
// inputs in stream order right after it: a rank that left the collective
// while a peer still read its inputs (no trailing barrier) would hand that
// peer the poison.
func (c *collective) launchThenPoison(h *symheap.Heap) error {
	if err := c.launch(h); err != nil || c.poison == nil {
		return err
	}
	return h.Allocator().LaunchHostFunc(func() error { c.poison(h); return nil })
}

// setupRank allocates the collective's tensors on one rank's heap.
func (c *collective) setupRank(h *symheap.Heap) error { return c.setup(h.Alloc) }

func collectives(n int) []*collective {
	var in, out symheap.Tensor
	chunk := int64(elems * 4)
	fillIn := func(h *symheap.Heap, r, k int) {
		for i := range h.Int32s(in) {
			h.Int32s(in)[i] = val(r, k, i)
		}
	}
	// expect checks got[i] == want(i) for every i.
	expect := func(what string, r, k int, got []int32, want func(i int) int32) error {
		for i := range got {
			if w := want(i); got[i] != w {
				return fmt.Errorf("%s: rank %d round %d: element %d is %d, want %d", what, r, k, i, got[i], w)
			}
		}
		return nil
	}
	sum := func(k, i int) (s int32) {
		for p := range n {
			s += val(p, k, i)
		}
		return s
	}
	two := func(a, b int64) func(func(int64) (symheap.Tensor, error)) error {
		return func(alloc func(int64) (symheap.Tensor, error)) (err error) {
			if in, err = alloc(a); err != nil {
				return err
			}
			out, err = alloc(b)
			return err
		}
	}
	return []*collective{
		{
			// In place: the result is copied out (in stream order) so the
			// inputs can be poisoned after it like the others'.
			name:  "all_reduce",
			setup: two(chunk, chunk),
			launch: func(h *symheap.Heap) error {
				if err := h.AllReduce(in, symheap.Int32); err != nil {
					return err
				}
				return h.Allocator().LaunchHostFunc(func() error { copy(h.Bytes(out), h.Bytes(in)); return nil })
			},
			fill: fillIn,
			verify: func(h *symheap.Heap, r, k int) error {
				return expect("all_reduce", r, k, h.Int32s(out), func(i int) int32 { return sum(k, i) })
			},
			poison: func(h *symheap.Heap) { clear(h.Bytes(in)) },
		},
		{
			name:   "all_gather",
			setup:  two(chunk, int64(n)*chunk),
			launch: func(h *symheap.Heap) error { return h.AllGather(in, out) },
			fill:   fillIn,
			verify: func(h *symheap.Heap, r, k int) error {
				return expect("all_gather", r, k, h.Int32s(out), func(i int) int32 { return val(i/elems, k, i%elems) })
			},
			poison: func(h *symheap.Heap) { clear(h.Bytes(in)) },
		},
		{
			name:   "reduce_scatter",
			setup:  two(int64(n)*chunk, chunk),
			launch: func(h *symheap.Heap) error { return h.ReduceScatter(in, out, symheap.Int32) },
			fill:   fillIn,
			verify: func(h *symheap.Heap, r, k int) error {
				return expect("reduce_scatter", r, k, h.Int32s(out), func(i int) int32 { return sum(k, r*elems+i) })
			},
			poison: func(h *symheap.Heap) { clear(h.Bytes(in)) },
		},
		{
			name:   "all_to_all",
			setup:  two(int64(n)*chunk, int64(n)*chunk),
			launch: func(h *symheap.Heap) error { return h.AllToAll(in, out) },
			fill:   fillIn,
			verify: func(h *symheap.Heap, r, k int) error {
				return expect("all_to_all", r, k, h.Int32s(out), func(i int) int32 { return val(i/elems, k, r*elems+i%elems) })
			},
			poison: func(h *symheap.Heap) { clear(h.Bytes(in)) },
		},
	}
}

func (s *suite) collectivesEagerAndCaptured(t *testing.T) {
	const n, replays = 4, 5
	for _, c := range collectives(n) {
		t.Run(c.name, func(t *testing.T) {
			w, ok := s.newWorld(t, n, 1<<20, symheap.Options{Timeout: 10 * time.Second, CheckAllocs: true})
			if !ok {
				return
			}
			c.setupWorld(t, w)
			launch := c.launchThenPoison
			// Eager.
			w.must(t, func(r int, h *symheap.Heap) error {
				c.fill(h, r, 0)
				if err := launch(h); err != nil {
					return err
				}
				return h.Allocator().Synchronize()
			})
			for r, h := range w.heaps {
				require.NoError(t, c.verify(h, r, 0))
			}
			// Captured once per rank, replayed with fresh data.
			graphs := make([]*alloc.Graph, n)
			w.must(t, func(r int, h *symheap.Heap) error {
				g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return launch(h) })
				graphs[r] = g
				return err
			})
			for k := 1; k <= replays; k++ {
				w.must(t, func(r int, h *symheap.Heap) error {
					c.fill(h, r, k)
					if err := graphs[r].Launch(); err != nil {
						return err
					}
					return h.Allocator().Synchronize()
				})
				for r, h := range w.heaps {
					if c.poison != nil {
						c.poison(h)
					}
					require.NoError(t, c.verify(h, r, k))
				}
			}
			for _, g := range graphs {
				require.NoError(t, g.Close())
			}
		})
	}
}

func (s *suite) float32AllReduce(t *testing.T) {
	const n = 3
	w, ok := s.newWorld(t, n, 1<<20, symheap.Options{})
	if !ok {
		return
	}
	x := w.alloc(t, 4*4096)
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := make([][]float32, n)
	for r, h := range w.heaps {
		for i := range h.Float32s(x) {
			h.Float32s(x)[i] = float32(rng.IntN(1000)) / 4 // exact in float32 sums
		}
		inputs[r] = append([]float32(nil), h.Float32s(x)...)
	}
	w.must(t, func(r int, h *symheap.Heap) error {
		if err := h.AllReduce(x, symheap.Float32); err != nil {
			return err
		}
		return h.Allocator().Synchronize()
	})
	for _, h := range w.heaps {
		for i, got := range h.Float32s(x) {
			var want float32
			for p := range n {
				want += inputs[p][i]
			}
			require.Equal(t, want, got, "element %d", i)
		}
	}
}

// Peers map each heap at their own addresses: offsets, not pointers, name
// the same bytes.
func (s *suite) peersAtDifferentAddresses(t *testing.T) {
	w, ok := s.newWorld(t, 2, 1<<16, symheap.Options{})
	if !ok {
		return
	}
	x := w.alloc(t, 64)
	b0, b1 := w.heaps[0].Bytes(x), w.heaps[1].Bytes(x)
	require.NotEqual(t, fmt.Sprintf("%p", &b0[0]), fmt.Sprintf("%p", &b1[0]))
}

// A rank that replays fewer times than its peer makes the peer fail with
// ErrCollectiveTimeout, at the timeout, reported by its Synchronize.
func (s *suite) skewedReplaysTimeOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	w, ok := s.newWorld(t, 2, 1<<16, symheap.Options{Timeout: timeout})
	if !ok {
		return
	}
	graphs := make([]*alloc.Graph, 2)
	w.must(t, func(r int, h *symheap.Heap) error {
		g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, h.Barrier)
		graphs[r] = g
		return err
	})
	replays := []int{2, 1}
	start := time.Now()
	errs := w.each(func(r int, h *symheap.Heap) error {
		for range replays[r] {
			if err := graphs[r].Launch(); err != nil {
				return err
			}
			if err := h.Allocator().Synchronize(); err != nil {
				return err
			}
		}
		return nil
	})
	require.ErrorIs(t, errs[0], symheap.ErrCollectiveTimeout, "the rank that replayed more waits in vain")
	require.NoError(t, errs[1])
	require.Less(t, time.Since(start), timeout+2*time.Second, "bounded by the timeout")
	require.ErrorIs(t, w.heaps[0].Err(), symheap.ErrCollectiveTimeout, "the heap stays broken")
	for _, g := range graphs {
		require.NoError(t, g.Close())
	}
}

func (s *suite) allocMismatchIsLoud(t *testing.T) {
	w, ok := s.newWorld(t, 2, 1<<16, symheap.Options{CheckAllocs: true, Timeout: 5 * time.Second})
	if !ok {
		return
	}
	_, err := w.heaps[0].Alloc(100)
	require.NoError(t, err)
	_, err = w.heaps[1].Alloc(200)
	require.NoError(t, err)
	errs := w.each(func(r int, h *symheap.Heap) error {
		if err := h.Barrier(); err != nil {
			return err
		}
		return h.Allocator().Synchronize()
	})
	for r, err := range errs {
		require.ErrorIs(t, err, symheap.ErrAllocMismatch, "rank %d", r)
	}
}

// Two goroutine ranks on one driver (engines share one driver per device),
// round after round: each queues an all-reduce, frees a scratch AllocSync
// buffer (a device-synchronizing call, which waits for every stream's
// work) and synchronizes. Nobody replays fewer times and nobody dies, so
// every round completes. On cpu the synchronous free used to run the other
// rank's queued barrier in the freeing goroutine, ahead of its own, and
// both ranks timed out (issue 21).
func (s *suite) ranksShareADriver(t *testing.T) {
	const n, rounds = 2, 20
	d := s.openDriver(t)
	w, ok := s.newWorldOn(t, n, 1<<16, symheap.Options{Timeout: 5 * time.Second}, func(int) alloc.Driver { return d })
	if !ok {
		return
	}
	x := w.alloc(t, 4*elems)
	for k := range rounds {
		w.must(t, func(r int, h *symheap.Heap) error {
			a := h.Allocator()
			scratch, err := a.AllocSync(4096)
			if err != nil {
				return err
			}
			for i := range h.Int32s(x) {
				h.Int32s(x)[i] = val(r, k, i)
			}
			if err := h.AllReduce(x, symheap.Int32); err != nil {
				return errors.Join(err, a.Free(scratch))
			}
			if err := a.Free(scratch); err != nil {
				return fmt.Errorf("round %d: freeing the scratch buffer: %w", k, err)
			}
			if err := a.Synchronize(); err != nil {
				return fmt.Errorf("round %d: %w", k, err)
			}
			for i, got := range h.Int32s(x) {
				if want := val(0, k, i) + val(1, k, i); got != want {
					return fmt.Errorf("round %d: rank %d: element %d is %d, want %d", k, r, i, got, want)
				}
			}
			return nil
		})
	}
}
