package symheap_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

// The device heap's collectives against the device's own yardsticks
// (issue 20, item 7), on the backend $CAPALLOC_BACKEND names (cuda when
// unset), 4 goroutine ranks on one device, one driver and stream each:
//
//   - DeviceAllReduce1KiB: a graph of 100 one-shot 1 KiB all-reduces per
//     rank, replayed; ns/allreduce against ns/emptykernel, a graph of 100
//     empty kernel nodes (axpy over nothing) on the same driver. Target:
//     ratio ≤ 2.
//   - DeviceBarrier: a graph of 10 barriers per rank, replayed; ns/barrier,
//     the price of one meeting of every rank's block (on the fakes, mostly
//     the host threads a launch makes).
//   - DeviceAllReduce64MiB: one two-shot 64 MiB all-reduce per rank in a
//     graph; the device-memory traffic of all ranks (every byte read and
//     written) per second, against a 256 MiB device-to-device copy's
//     (read + write) in the same run. Target: ratio ≥ 0.7.
//
// Skipped where the backend does not open or runs no kernels of ours.
//
//	go test ./symheap -run '^$' -bench 'Device' -benchtime 20x -count 6

func benchBackend() string {
	if b := os.Getenv("CAPALLOC_BACKEND"); b != "" {
		return b
	}
	return "cuda"
}

type devWorld struct {
	as    []*alloc.Allocator
	heaps []*symheap.DeviceHeap
}

func newDevWorld(b *testing.B, size int64) *devWorld {
	w := &devWorld{}
	for range benchRanks {
		d, err := backends.OpenDriver(context.Background(), benchBackend())
		if err != nil {
			b.Skipf("backend %s: %v", benchBackend(), err)
		}
		a, err := alloc.New(d, alloc.Options{Watchdog: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = a.Close(); _ = d.Close() })
		w.as = append(w.as, a)
	}
	if !symheap.DeviceRuns(w.as[0].Driver()) {
		b.Skipf("backend %s has no device heap", benchBackend())
	}
	x := symheap.NewLocalExchange(benchRanks)
	w.heaps = make([]*symheap.DeviceHeap, benchRanks)
	if err := w.each(func(r int) (err error) {
		w.heaps[r], err = symheap.OpenDevice(r, w.as[r], x, size, symheap.DeviceOptions{Timeout: time.Minute})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.each(func(r int) error { return w.heaps[r].Close() }) })
	if err := w.heaps[0].CollectivesRun(); err != nil {
		b.Skip(err)
	}
	return w
}

func (w *devWorld) each(fn func(r int) error) error {
	return errors.Join(ranks.Each(len(w.as), fn)...)
}

// capture records body on every rank and returns the graphs.
func (w *devWorld) capture(b *testing.B, body func(r int) error) []*alloc.Graph {
	gs := make([]*alloc.Graph, len(w.as))
	if err := w.each(func(r int) (err error) {
		gs[r], err = w.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return body(r) })
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, g := range gs {
			_ = g.Close()
		}
	})
	return gs
}

// replay launches every rank's graph n times and waits; the elapsed time.
func (w *devWorld) replay(b *testing.B, gs []*alloc.Graph, n int) time.Duration {
	start := time.Now()
	if err := w.each(func(r int) error {
		for range n {
			if err := gs[r].Launch(); err != nil {
				return err
			}
		}
		return w.heaps[r].Synchronize()
	}); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

func BenchmarkDeviceAllReduce1KiB(b *testing.B) {
	const nodes = 100
	w := newDevWorld(b, 1<<20)
	ts := make([]symheap.Tensor, benchRanks)
	for r, h := range w.heaps {
		var err error
		if ts[r], err = h.Alloc(1 << 10); err != nil {
			b.Fatal(err)
		}
	}
	coll := w.capture(b, func(r int) error {
		for range nodes {
			if err := w.heaps[r].AllReduceWith(ts[r], symheap.Float32, symheap.OneShot); err != nil {
				return err
			}
		}
		return nil
	})
	// The yardstick: as many empty kernels in the same kind of graph.
	kl := w.as[0].Driver().(driver.KernelLauncher)
	mod, err := kl.LoadModule(kernels.Image())
	if err != nil {
		b.Fatal(err)
	}
	params := (&kernels.AxpyArgs{}).Encode(make([]byte, kernels.AxpySize))
	empty := w.capture(b, func(r int) error {
		for range nodes {
			if err := w.as[r].Enqueue("empty kernel", nil, func(s driver.Stream) error {
				return w.as[r].Driver().(driver.KernelLauncher).LaunchKernel(mod.Kernels[kernels.Axpy], 1, 32, params, s)
			}); err != nil {
				return err
			}
		}
		return nil
	})
	w.replay(b, coll, 2) // warm
	w.replay(b, empty, 2)
	b.ResetTimer()
	var tc, te time.Duration
	for range b.N {
		tc += w.replay(b, coll, 1)
		te += w.replay(b, empty, 1)
	}
	perColl := float64(tc.Nanoseconds()) / float64(b.N*nodes)
	perEmpty := float64(te.Nanoseconds()) / float64(b.N*nodes)
	b.ReportMetric(perColl, "ns/allreduce")
	b.ReportMetric(perEmpty, "ns/emptykernel")
	b.ReportMetric(perColl/perEmpty, "ratio")
}

func BenchmarkDeviceBarrier(b *testing.B) {
	const nodes = 10
	w := newDevWorld(b, 1<<16)
	gs := w.capture(b, func(r int) error {
		for range nodes {
			if err := w.heaps[r].Barrier(); err != nil {
				return err
			}
		}
		return nil
	})
	w.replay(b, gs, 1) // warm
	b.ResetTimer()
	t := w.replay(b, gs, b.N)
	b.ReportMetric(float64(t.Nanoseconds())/float64(b.N*nodes), "ns/barrier")
}

func BenchmarkDeviceAllReduce64MiB(b *testing.B) {
	const size, copySize = 64 << 20, 256 << 20
	w := newDevWorld(b, size+4096)
	ts := make([]symheap.Tensor, benchRanks)
	for r, h := range w.heaps {
		var err error
		if ts[r], err = h.Alloc(size); err != nil {
			b.Fatal(err)
		}
	}
	coll := w.capture(b, func(r int) error {
		return w.heaps[r].AllReduceWith(ts[r], symheap.Float32, symheap.TwoShot)
	})
	a := w.as[0]
	src, err := a.AllocSync(copySize)
	if err != nil {
		b.Skipf("no room for the copy's yardstick: %v", err)
	}
	dst, err := a.AllocSync(copySize)
	if err != nil {
		_ = a.Free(src)
		b.Skipf("no room for the copy's yardstick: %v", err)
	}
	b.Cleanup(func() { _ = a.Free(src); _ = a.Free(dst) })
	copyOnce := func() time.Duration {
		start := time.Now()
		if err := a.Copy(dst, 0, src, 0, copySize); err != nil {
			b.Fatal(err)
		}
		if err := a.Synchronize(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	w.replay(b, coll, 1) // warm
	copyOnce()
	b.ResetTimer()
	var tc, tcopy time.Duration
	for range b.N {
		tc += w.replay(b, coll, 1)
		tcopy += copyOnce()
	}
	// Two-shot traffic of one rank: phase 1 reads its 1/N share from every
	// rank (S) and writes it (S/N); phase 2 reads the other N-1 shares
	// and writes them ((N-1)·S/N each way).
	n := float64(benchRanks)
	traffic := n * size * (1 + 1/n + 2*(n-1)/n)
	collBW := traffic * float64(b.N) / tc.Seconds()
	copyBW := 2 * copySize * float64(b.N) / tcopy.Seconds()
	b.ReportMetric(collBW/1e9, "GB/s")
	b.ReportMetric(copyBW/1e9, "copyGB/s")
	b.ReportMetric(collBW/copyBW, "ratio")
}
