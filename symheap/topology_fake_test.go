package symheap_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

// The device heap's topology over both fake runtimes (docs/
// device-collectives.md, "Grids"; docs/symmetric-heap.md, "Peer access"):
// grids from the occupancy the fake reports, refused where the ranks'
// blocks cannot be co-resident, and ranks spread over several fake
// devices of one process.

// fakeVendor is one fake runtime and how to open a driver on a device.
type fakeVendor struct {
	name, env, launch string
	fake              *gpurttest.Fake
	open              func(dev int) (driver.Driver, error)
}

var fakeVendors = []*fakeVendor{
	{name: "cuda", env: "FAKE_CUDA_", launch: "cuLaunchKernel",
		fake: &gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart", LibEnv: cuda.LibEnv},
		open: func(dev int) (driver.Driver, error) { return cuda.New(cuda.Options{Device: dev}) }},
	{name: "hip", env: "FAKE_HIP_", launch: "hipModuleLaunchKernel",
		fake: &gpurttest.Fake{Src: "hip/testdata/fakehip.c", Name: "libamdhip64", LibEnv: hip.LibEnv},
		open: func(dev int) (driver.Driver, error) { return hip.New(hip.Options{Device: dev}) }},
}

// forEachFake runs test per vendor on a fresh build of its fake (fresh
// state: peer access starts disabled), with its call log.
func forEachFake(t *testing.T, test func(t *testing.T, v *fakeVendor, log *gpurttest.Log), cflags ...string) {
	for _, v := range fakeVendors {
		t.Run(v.name, func(t *testing.T) {
			lib := v.fake.Lib(t, cflags...)
			test(t, v, gpurttest.OpenLog(t, lib))
		})
	}
}

// topoWorld is one goroutine rank per entry of devices: its own driver
// on that device, allocator and device heap.
type topoWorld struct {
	as    []*alloc.Allocator
	heaps []*symheap.DeviceHeap
}

// onOneDevice sets the fake device's multiprocessors (sms) and the
// kernels' resident blocks per multiprocessor (blocksPerSM, the fake's
// BLOCKS_PER_SM list; "": the fake's own answer), then opens ranks ranks
// on that one device, as openTopo.
func onOneDevice(t *testing.T, v *fakeVendor, sms, blocksPerSM string, ranks int, timeout time.Duration) (*topoWorld, []error) {
	t.Helper()
	t.Setenv(v.env+"SMS", sms)
	if blocksPerSM != "" {
		t.Setenv(v.env+"BLOCKS_PER_SM", blocksPerSM)
	}
	return openTopo(t, v, make([]int, ranks), timeout, nil)
}

// openTopoOK is openTopo where every rank must open.
func openTopoOK(t *testing.T, v *fakeVendor, devices []int, timeout time.Duration, wrap func(driver.Driver) driver.Driver) *topoWorld {
	t.Helper()
	w, errs := openTopo(t, v, devices, timeout, wrap)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return w
}

// openTopo opens the ranks' heaps and returns the world and each rank's
// open error; the heaps that opened are closed at the end of the test.
func openTopo(t *testing.T, v *fakeVendor, devices []int, timeout time.Duration, wrap func(driver.Driver) driver.Driver) (*topoWorld, []error) {
	t.Helper()
	return openTopoVia(t, v, devices, timeout, wrap, symheap.NewLocalExchange(len(devices)))
}

// openTopoVia is openTopo through the exchange x.
func openTopoVia(t *testing.T, v *fakeVendor, devices []int, timeout time.Duration, wrap func(driver.Driver) driver.Driver, x symheap.Exchange) (*topoWorld, []error) {
	t.Helper()
	n := len(devices)
	w := &topoWorld{as: make([]*alloc.Allocator, n), heaps: make([]*symheap.DeviceHeap, n)}
	for r, dev := range devices {
		d, err := v.open(dev)
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		var drv driver.Driver = d
		if wrap != nil {
			drv = wrap(d)
		}
		w.as[r], err = alloc.New(drv, alloc.Options{})
		require.NoError(t, err)
		a := w.as[r]
		t.Cleanup(func() { require.NoError(t, a.Close()) })
	}
	errs := w.each(func(r int) (err error) {
		w.heaps[r], err = symheap.OpenDevice(r, w.as[r], x, 1<<20, symheap.DeviceOptions{Timeout: timeout})
		return err
	})
	t.Cleanup(func() {
		for r, err := range w.each(func(r int) error {
			if w.heaps[r] == nil {
				return nil
			}
			return w.heaps[r].Close()
		}) {
			require.NoError(t, err, "closing rank %d", r)
		}
	})
	return w, errs
}

func (w *topoWorld) each(fn func(r int) error) []error { return ranks.Each(len(w.as), fn) }

func (w *topoWorld) must(t *testing.T, fn func(r int) error) {
	t.Helper()
	for r, err := range w.each(fn) {
		require.NoError(t, err, "rank %d", r)
	}
}

// topoElems is each rank's chunk: 16384 int32s, 64 KiB, work for the
// largest grid a launch may have (kernels.MaxBlocks blocks of 64 threads,
// each a 16-byte pack, in a one-shot all-reduce) where the device holds
// that many blocks a rank, and for more than the small fake devices let
// a rank have.
const topoElems = 16384

// val is element i of rank r's input in round k.
func val(r, k, i int) int32 { return int32(1000*r + 7*k + i%97) }

// topoColl is one collective: its tensors' sizes in elements for n ranks,
// its launch, and element i of rank r's result in round k.
type topoColl struct {
	name    string
	in, out func(n int) int
	run     func(h *symheap.DeviceHeap, in, out symheap.Tensor) error
	want    func(n, r, k, i int) int32
}

func topoColls() []topoColl {
	e := func(int) int { return topoElems }
	ne := func(n int) int { return n * topoElems }
	sum := func(n, k, i int) (s int32) {
		for p := range n {
			s += val(p, k, i)
		}
		return s
	}
	allReduce := func(alg symheap.Algorithm) func(h *symheap.DeviceHeap, in, _ symheap.Tensor) error {
		return func(h *symheap.DeviceHeap, in, _ symheap.Tensor) error {
			return h.AllReduceWith(in, symheap.Int32, alg)
		}
	}
	return []topoColl{
		{"barrier", e, e, func(h *symheap.DeviceHeap, _, _ symheap.Tensor) error { return h.Barrier() }, nil},
		{"allreduce_oneshot", e, e, allReduce(symheap.OneShot), func(n, _, k, i int) int32 { return sum(n, k, i) }},
		{"allreduce_twoshot", e, e, allReduce(symheap.TwoShot), func(n, _, k, i int) int32 { return sum(n, k, i) }},
		{"allgather", e, ne, func(h *symheap.DeviceHeap, in, out symheap.Tensor) error { return h.AllGather(in, out) },
			func(_, _, k, i int) int32 { return val(i/topoElems, k, i%topoElems) }},
		{"reducescatter", ne, e, func(h *symheap.DeviceHeap, in, out symheap.Tensor) error {
			return h.ReduceScatter(in, out, symheap.Int32)
		},
			func(n, r, k, i int) int32 { return sum(n, k, r*topoElems+i) }},
		{"alltoall", ne, ne, func(h *symheap.DeviceHeap, in, out symheap.Tensor) error { return h.AllToAll(in, out) },
			func(_, r, k, i int) int32 { return val(i/topoElems, k, r*topoElems+i%topoElems) }},
	}
}

// runCollectives runs every collective on w's heaps eagerly and then
// captured, replaying the graphs with fresh inputs, and checks every
// rank's result each time.
func runCollectives(t *testing.T, w *topoWorld) {
	n := len(w.heaps)
	for _, c := range topoColls() {
		t.Run(c.name, func(t *testing.T) {
			ins, outs := make([]symheap.Tensor, n), make([]symheap.Tensor, n)
			for r, h := range w.heaps {
				require.NoError(t, h.Reset())
				var err error
				ins[r], err = h.Alloc(4 * int64(c.in(n)))
				require.NoError(t, err)
				outs[r], err = h.Alloc(4 * int64(c.out(n)))
				require.NoError(t, err)
			}
			round := func(k int, launch func(r int) error) {
				w.must(t, func(r int) error {
					h := w.heaps[r]
					b := make([]byte, ins[r].Size)
					for i := range c.in(n) {
						binary.LittleEndian.PutUint32(b[4*i:], uint32(val(r, k, i)))
					}
					if err := h.Allocator().Upload(h.Buffer(), symheap.SignalPadBytes+ins[r].Off, b); err != nil {
						return err
					}
					if err := launch(r); err != nil {
						return err
					}
					return h.Synchronize()
				})
				if c.want == nil {
					return
				}
				w.must(t, func(r int) error {
					h, res := w.heaps[r], outs[r]
					if strings.HasPrefix(c.name, "allreduce") {
						res = ins[r]
					}
					b := make([]byte, res.Size)
					if err := h.Allocator().Download(b, h.Buffer(), symheap.SignalPadBytes+res.Off); err != nil {
						return err
					}
					for i := range len(b) / 4 {
						if got, want := int32(binary.LittleEndian.Uint32(b[4*i:])), c.want(n, r, k, i); got != want {
							return fmt.Errorf("round %d: element %d is %d, want %d", k, i, got, want)
						}
					}
					return nil
				})
			}
			round(0, func(r int) error { return c.run(w.heaps[r], ins[r], outs[r]) })
			graphs := make([]*alloc.Graph, n)
			w.must(t, func(r int) (err error) {
				graphs[r], err = w.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
					return c.run(w.heaps[r], ins[r], outs[r])
				})
				return err
			})
			for k := 1; k <= 2; k++ {
				round(k, func(r int) error { return graphs[r].Launch() })
			}
			for _, g := range graphs {
				require.NoError(t, g.Close())
			}
		})
	}
}

// launchGrids are the grids of the collective kernels' launches in the
// log lines: of the aligned variants, or of the general kernels.
func launchGrids(t *testing.T, v *fakeVendor, lines []string, aligned bool) map[string]bool {
	t.Helper()
	grids := map[string]bool{}
	for _, l := range gpurttest.Find(lines, v.launch+" kernel=") {
		if strings.Contains(l, "kernel="+kernels.Axpy+" ") || strings.Contains(l, "_aligned ") != aligned {
			continue
		}
		_, g, ok := strings.Cut(l, " grid=")
		require.True(t, ok, l)
		g, _, _ = strings.Cut(g, " ")
		grids[g] = true
	}
	return grids
}

// Eight ranks on one small fake device (4 multiprocessors; the general
// two-shot all-reduce fits 2 blocks per multiprocessor, the other
// collectives and every aligned variant 8): 8 resident blocks of the
// general kernels shared by 8 ranks leave each rank one block, so every
// general kernel launches a grid of 1 (the old rule, min(64,
// multiprocessors), gave 4); the aligned variants, sized by their own
// occupancy, get 32 / 8 = 4 and use them; every collective passes, eager
// and captured.
func TestFakeGridFromOccupancy(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		w, errs := onOneDevice(t, v, "4", kernels.AllReduceTwoShot+"=2,*=8", 8, 20*time.Second)
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
		for _, h := range w.heaps {
			require.EqualValues(t, 1, symheap.MaxGrid(h))
			require.EqualValues(t, 4, symheap.MaxGridAligned(h))
		}
		lines := log.Lines()
		require.NotEmpty(t, gpurttest.Find(lines, "OccupancyMaxActiveBlocksPerMultiprocessor kernel="+kernels.AllReduceTwoShot+" block=64 shared=0 -> 2"),
			"the occupancy was asked at the launch's block size")
		runCollectives(t, w)
		lines = log.Lines()
		require.Equal(t, map[string]bool{"1,1,1": true}, launchGrids(t, v, lines, false))
		aligned := launchGrids(t, v, lines, true)
		require.True(t, aligned["4,1,1"], "the aligned variants launch up to their own limit: %v", aligned)
		for g := range aligned {
			require.Contains(t, []string{"1,1,1", "2,1,1", "3,1,1", "4,1,1"}, g)
		}
	})
}

// Where the ranks on a device leave a rank no block (4 multiprocessors of
// 1 reduce-scatter block each, 8 ranks), every rank's open fails with
// ErrNotCoResident naming the device, the kernel and the numbers; no
// kernel ran and no memory is left.
func TestFakeNotCoResidentRefusedAtOpen(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, log *gpurttest.Log) {
		w, errs := onOneDevice(t, v, "4", kernels.ReduceScatter+"=1,*=8", 8, 20*time.Second)
		for r, err := range errs {
			require.ErrorIs(t, err, symheap.ErrNotCoResident, "rank %d", r)
			require.Contains(t, err.Error(), "device 0 (0000:10:00.0) of rank 0: kernel "+kernels.ReduceScatter+
				" fits 1 block(s) per multiprocessor (cuOccupancyMaxActiveBlocksPerMultiprocessor / hipModuleOccupancyMaxActiveBlocksPerMultiprocessor) x 4 multiprocessors = 4 resident blocks, shared by 8 rank(s)")
			require.Nil(t, w.heaps[r])
			require.Zero(t, w.as[r].Stats().LiveBuffers, "rank %d freed its heap", r)
		}
		require.Empty(t, gpurttest.Find(log.Lines(), v.launch), "nothing launched")
	})
}

// A runtime without the occupancy query: one block per multiprocessor is
// assumed, so 2 ranks on 4 multiprocessors get 2 blocks each and 8 ranks
// are refused, saying the count was assumed.
func TestFakeNoOccupancyQueryAssumesOneBlock(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, _ *gpurttest.Log) {
		w, errs := onOneDevice(t, v, "4", "", 2, 20*time.Second)
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
			require.EqualValues(t, 2, symheap.MaxGrid(w.heaps[r]))
		}
		_, errs = openTopo(t, v, make([]int, 8), 20*time.Second, nil)
		for r, err := range errs {
			require.ErrorIs(t, err, symheap.ErrNotCoResident, "rank %d", r)
			require.Contains(t, err.Error(), "1 block(s) per multiprocessor (assumed: the driver has no occupancy query) x 4 multiprocessors")
		}
	}, "-DFAKE_NO_OCCUPANCY")
}

// A grid larger than the device holds (forced: 4 blocks a rank where one
// multiprocessor holds 2 and both ranks share it) may wait, as on a GPU,
// for blocks that never start: when both slots hold blocks whose partner
// block (the same block of the other rank) is not resident, the barriers
// give up at the heap's timeout and Synchronize reports the heap's typed
// error, ErrCollectiveTimeout. Whether the slots fill that way depends on
// the order the ranks' blocks start in, on the fake as on a GPU, so a run
// may also complete: what must hold is that no rank hangs or fails any
// other way, and the heaps close.
func TestFakeOversizeGridTimesOut(t *testing.T) {
	forEachFake(t, func(t *testing.T, v *fakeVendor, _ *gpurttest.Log) {
		w, errs := onOneDevice(t, v, "1", "2", 2, time.Second)
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
			require.EqualValues(t, 1, symheap.MaxGrid(w.heaps[r]))
			symheap.SetMaxGrid(w.heaps[r], 4)
		}
		var timedOut sync.Map
		w.each(func(r int) error {
			h := w.heaps[r]
			in, err := h.Alloc(4 * topoElems)
			if err == nil {
				err = h.AllReduceWith(in, symheap.Int32, symheap.OneShot)
			}
			if err == nil {
				err = h.Synchronize()
			}
			if err != nil {
				timedOut.Store(r, err)
			}
			return nil
		})
		n := 0
		timedOut.Range(func(r, err any) bool {
			require.ErrorIs(t, err.(error), symheap.ErrCollectiveTimeout, "rank %d", r)
			n++
			return true
		})
		t.Logf("%d of 2 ranks timed out (0: the blocks started in an order that let every pair meet)", n)
	})
}
