package symheap_test

import (
	"sync"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// Collectives on 4 goroutine ranks of the cpu backend, per operation:
// eager (enqueue + synchronize each time) against captured (one graph per
// rank, launch + synchronize). BenchmarkSumLoop is the plain Go loop one
// rank's all-reduce work amounts to (sum 4 buffers, write the result), the
// bandwidth baseline.
//
//	go test ./symheap -run '^$' -bench . -count 6 | tee new.txt; benchstat new.txt

const benchRanks = 4

type benchWorld struct {
	heaps []*symheap.Heap
}

func newBenchWorld(b *testing.B, size int64) *benchWorld {
	g, err := symheap.NewGroup(benchRanks, size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close() })
	w := &benchWorld{}
	for r := range benchRanks {
		h, err := g.Open(r, cpuAllocator(b, 1<<30, nil), symheap.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = h.Close() })
		w.heaps = append(w.heaps, h)
	}
	return w
}

// alloc allocates the same tensor of size bytes on every rank's heap.
func (w *benchWorld) alloc(b *testing.B, size int64) symheap.Tensor {
	var x symheap.Tensor
	for _, h := range w.heaps {
		var err error
		if x, err = h.Alloc(size); err != nil {
			b.Fatal(err)
		}
	}
	return x
}

// run times n iterations of step on every rank at once.
func (w *benchWorld) run(b *testing.B, step func(r int, h *symheap.Heap) error) {
	var wg sync.WaitGroup
	errs := make([]error, benchRanks)
	b.ResetTimer()
	for r, h := range w.heaps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				if err := step(r, h); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

func benchCollective(b *testing.B, size int64, launch func(h *symheap.Heap, t symheap.Tensor) error) {
	for _, mode := range []string{"eager", "captured"} {
		b.Run(mode, func(b *testing.B) {
			w := newBenchWorld(b, 4*size+4096)
			x := w.alloc(b, size)
			graphs := make([]*alloc.Graph, benchRanks)
			if mode == "captured" {
				for r, h := range w.heaps {
					g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return launch(h, x) })
					if err != nil {
						b.Fatal(err)
					}
					graphs[r] = g
					b.Cleanup(func() { _ = g.Close() })
				}
			}
			b.SetBytes(size)
			w.run(b, func(r int, h *symheap.Heap) error {
				if mode == "captured" {
					if err := graphs[r].Launch(); err != nil {
						return err
					}
				} else if err := launch(h, x); err != nil {
					return err
				}
				return h.Allocator().Synchronize()
			})
		})
	}
}

func BenchmarkBarrier(b *testing.B) {
	benchCollective(b, 4096, func(h *symheap.Heap, _ symheap.Tensor) error { return h.Barrier() })
}

func BenchmarkAllReduce(b *testing.B) {
	for _, s := range []struct {
		name string
		n    int64
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		b.Run(s.name, func(b *testing.B) {
			benchCollective(b, s.n, func(h *symheap.Heap, t symheap.Tensor) error { return h.AllReduce(t, symheap.Float32) })
		})
	}
}

// BenchmarkSumLoop is one rank's all-reduce work as a plain Go loop over
// the same shared buffers: sum 4 float32 buffers of 1 MiB into scratch,
// copy the result back.
func BenchmarkSumLoop(b *testing.B) {
	const size = 1 << 20
	w := newBenchWorld(b, 4*size+4096)
	x := w.alloc(b, size)
	scratch := make([]float32, size/4)
	bufs := make([][]float32, benchRanks)
	for r, h := range w.heaps {
		bufs[r] = h.Float32s(x)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		copy(scratch, bufs[0])
		for _, src := range bufs[1:] {
			for i := range scratch {
				scratch[i] += src[i]
			}
		}
		copy(bufs[0], scratch)
	}
}
