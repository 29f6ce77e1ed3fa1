// Command moe is a toy mixture-of-experts layer over ranks, rank e
// hosting expert e. Every step each rank has tokens; a router (a
// deterministic pseudo-random choice per step, now and then sending every
// token to one expert, or giving a rank no tokens at all) picks each
// token's expert. Dispatch is an AllToAllV of the tokens, grouped by
// expert, to the experts; each expert scales its tokens and adds its bias;
// combine is an AllToAllV back, whose send counts are the dispatch's
// receive counts, still in the heap. The step (dispatch, expert, combine)
// is captured once per rank and replayed every step with the new routing:
// the counts are written into the heap by the replay itself, from pinned
// memory the host fills before each launch, and read by the collectives
// when they run. Every token's result is checked against the
// single-process computation, bit for bit.
//
// The step is written against symheap.Collectives: on cpu the host heap
// (host functions), on cuda and hip the device heap (this library's
// kernels, which read the counts on the device).
//
//	go run ./examples/moe                 # 4 ranks as goroutines, cpu
//	go run ./examples/moe -backend=cuda   # on the device heap
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/capalloc/capalloc/alloc"
	_ "github.com/capalloc/capalloc/cpu" // the backends a -backend name may ask for
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/prog"
	"github.com/capalloc/capalloc/internal/rankheap"
	"github.com/capalloc/capalloc/symheap"
)

func main() {
	steps := flag.Int("steps", 50, "steps, each with new tokens and a new routing")
	backend := flag.String("backend", "cpu", "backend of every rank (a backends name: cpu, cuda, hip)")
	flag.Parse()
	prog.ExitOnError("moe", run(os.Stdout, *backend, *steps))
}

// run runs every rank as a goroutine, each on its own driver of backend.
func run(w io.Writer, backend string, steps int) error {
	kinds, err := rankheap.RunLocal(backend, experts, heapSize, symheap.Options{Timeout: timeout}, func(h symheap.Collectives, a *alloc.Allocator, r int) error {
		return runRank(h, a, r, steps)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d experts as goroutines on %s (%s): dispatch, expert and combine captured once, %d steps replayed with new routing, every token checked\n",
		experts, backend, kinds[0], steps)
	return nil
}
