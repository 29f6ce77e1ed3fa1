// Command timeline serves the allocation timeline of package
// alloc/allocview for a decode-like loop on the CPU backend, to see what
// it shows: model weights loaded once, a KV cache that grows every few
// steps, activations allocated and freed in every step, one step captured
// into a graph that keeps its logits, and, at the end, a KV growth the
// device cannot hold (an out-of-memory error, after which half the cache
// is freed and the pool trimmed). The allocator keeps its history
// (alloc.Options.History) and writes it to -oom-file at the error.
//
//	go run ./examples/timeline        # then open http://localhost:6060/debug/capalloc/timeline
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/capalloc/capalloc/alloc"
	_ "github.com/capalloc/capalloc/alloc/allocview" // mounts /debug/capalloc/
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/internal/prog"
)

func main() {
	addr := flag.String("addr", "localhost:6060", "address to serve on")
	oomFile := flag.String("oom-file", "", "where to write the history at the out-of-memory error (none when empty)")
	flag.Parse()
	d, a, err := open(*oomFile)
	if err != nil {
		fail(err)
	}
	defer d.Close()
	defer a.Close()
	g, err := decode(a, 40)
	if err != nil {
		fail(err)
	}
	defer g.Close()

	if err := prog.Serve(*addr, "/debug/capalloc/timeline"); err != nil {
		fail(err)
	}
}

// open makes the device the loop runs on (96 MiB of cpu memory) and its
// allocator, which keeps its history and writes it to historyFile at an
// out-of-memory error (none when empty).
func open(historyFile string) (*cpu.Driver, *alloc.Allocator, error) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 96 << 20})
	if err != nil {
		return nil, nil, err
	}
	a, err := alloc.New(d, alloc.Options{Name: "decoder", History: 10000, HistoryFile: historyFile})
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return d, a, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "timeline:", err)
	os.Exit(1)
}

// The sites below are what the timeline's legend names, one function each.

func loadWeights(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(24 << 20) }

func growKV(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

func activations(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

func logits(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(1 << 20) }

// decode runs steps of the loop on a and returns the captured step's
// graph; the weights and what is left of the cache stay allocated.
func decode(a *alloc.Allocator, steps int) (*alloc.Graph, error) {
	if _, err := loadWeights(a); err != nil {
		return nil, err
	}
	var kv []alloc.Buffer
	var graph *alloc.Graph
	for step := range steps {
		if step%4 == 0 {
			b, err := growKV(a, 2<<20)
			if err != nil {
				return nil, err
			}
			kv = append(kv, b)
		}
		var acts []alloc.Buffer
		for layer := range 6 {
			b, err := activations(a, int64(512<<10)*int64(layer%3+1))
			if err != nil {
				return nil, err
			}
			acts = append(acts, b)
		}
		if step == steps/2 {
			g, err := a.WithCapture(alloc.CaptureOptions{Name: "decode-step"}, func() error {
				_, err := logits(a) // the graph's until it is closed
				return err
			})
			if err != nil {
				return nil, err
			}
			graph = g
		}
		l, err := logits(a)
		if err != nil {
			return nil, err
		}
		for _, b := range append(acts, l) {
			if err := a.Free(b); err != nil {
				return nil, err
			}
		}
	}
	if _, err := growKV(a, 80<<20); !errors.Is(err, alloc.ErrOutOfMemory) {
		return nil, fmt.Errorf("want an out-of-memory error growing the cache past the device, got %v", err)
	}
	for _, b := range kv[:len(kv)/2] { // sequences evicted
		if err := a.Free(b); err != nil {
			return nil, err
		}
	}
	return graph, a.Trim()
}
