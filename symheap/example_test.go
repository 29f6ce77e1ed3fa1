package symheap_test

import (
	"fmt"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/symheap"
)

// Two ranks, goroutines of one process on the cpu backend, each with its
// own allocator: every rank captures one all-reduce of a tensor of the
// heap, then replays it with fresh data at every step.
func ExampleGroup() {
	const ranks = 2
	g, err := symheap.NewGroup(ranks, 1<<16)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	heaps := make([]*symheap.Heap, ranks)
	for r := range heaps {
		d, _ := cpu.New(cpu.Options{})
		defer d.Close()
		a, _ := alloc.New(d, alloc.Options{})
		defer a.Close()
		if heaps[r], err = g.Open(r, a, symheap.Options{}); err != nil {
			fmt.Println(err)
			return
		}
		defer heaps[r].Close()
	}

	results := make([][]float32, 2) // rank 0's sums, step by step
	var wg sync.WaitGroup
	for r, h := range heaps {
		wg.Go(func() {
			x, _ := h.Alloc(4 * 4) // the same offset on every rank: arithmetic, no driver call
			a := h.Allocator()
			graph, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
				return h.AllReduce(x, symheap.Float32)
			})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer graph.Close()
			v := h.Float32s(x) // this rank's bytes of x
			for step := range 2 {
				for i := range v {
					v[i] = float32((r + 1) * (i + step*10)) // fresh data, same graph
				}
				_ = graph.Launch()
				_ = a.Synchronize()
				if r == 0 {
					results[step] = append([]float32(nil), v...)
				}
			}
		})
	}
	wg.Wait()
	for step, sum := range results {
		fmt.Println("step", step, "sum of both ranks:", sum)
	}
	// Output:
	// step 0 sum of both ranks: [0 3 6 9]
	// step 1 sum of both ranks: [30 33 36 39]
}
