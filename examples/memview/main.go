// Command memview serves the device memory views of package
// alloc/allocview for an engine-like workload, to see what they show:
// two allocators, one with model weights, a paged KV cache with holes,
// workspaces reserved before capture, and a decode step captured into a
// graph that owns its temporaries and holds a KV page freed during the
// capture, a 4 KiB buffer, and eight decode graphs (batch 8 down to 1)
// captured into one named graph pool; the other prefill-sized buffers and
// a wholly free (cached) segment. Every allocation is recorded in the
// profile.
//
//	go run ./examples/memview                 # then open http://localhost:6060/debug/capalloc/
//	go tool pprof -top http://localhost:6060/debug/capalloc/profile
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/capalloc/capalloc/alloc"
	_ "github.com/capalloc/capalloc/alloc/allocview" // mounts /debug/capalloc/ and the "capalloc" expvar
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/prog"
)

func main() {
	addr := flag.String("addr", "localhost:6060", "address to serve on")
	backend := prog.BackendFlag()
	rate := flag.Int("rate", 1, "alloc.SetProfileRate: 1 records every allocation, 0 none")
	flag.Parse()
	if _, err := alloc.SetProfileRate(*rate); err != nil {
		fail(err)
	}
	o, err := backends.OpenString(context.Background(), *backend)
	if err != nil {
		fail(err)
	}
	defer o.Driver.Close()
	w, err := load(o.Driver)
	if err != nil {
		fail(err)
	}
	defer w.close()

	if err := prog.Serve(*addr, "/debug/capalloc/"); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "memview:", err)
	os.Exit(1)
}

// workload is what load allocated, for close to give back.
type workload struct {
	decoder, prefill *alloc.Allocator
	bufs             map[*alloc.Allocator][]alloc.Buffer
	hosts            []*alloc.HostBuffer
	graph            *alloc.Graph
	pool             *alloc.GraphPool
	batches          []*alloc.Graph
}

// The sites below are what the profile shows, one function each.

func loadWeights(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(24 << 20) }

func kvPage(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(256 << 10) }

func seqLengths(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(4 << 10) }

func stepTemp(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(3 << 20) }

func prefillActivations(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

func batchTemp(a *alloc.Allocator, batch int) (alloc.Buffer, error) {
	return a.Alloc(int64(batch) * 64 << 10)
}

func batchOutput(a *alloc.Allocator, batch int) (alloc.Buffer, error) {
	return a.Alloc(int64(batch) * 4 << 10)
}

// load builds the workload on drv.
func load(drv driver.Driver) (*workload, error) {
	dec, err := alloc.New(drv, alloc.Options{Name: "decoder"})
	if err != nil {
		return nil, err
	}
	pre, err := alloc.New(drv, alloc.Options{Name: "prefill"})
	if err != nil {
		dec.Close()
		return nil, err
	}
	w := &workload{decoder: dec, prefill: pre, bufs: map[*alloc.Allocator][]alloc.Buffer{}}
	if err := w.fill(); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// keep records b, allocated from a, for close.
func (w *workload) keep(a *alloc.Allocator, b alloc.Buffer, err error) error {
	if err == nil {
		w.bufs[a] = append(w.bufs[a], b)
	}
	return err
}

func (w *workload) fill() error {
	dec, pre := w.decoder, w.prefill
	b, err := loadWeights(dec)
	if err := w.keep(dec, b, err); err != nil {
		return err
	}
	var pages []alloc.Buffer
	for range 24 {
		p, err := kvPage(dec)
		if err != nil {
			return err
		}
		pages = append(pages, p)
	}
	for i, p := range pages { // sequences that finished: holes in the cache
		if i%3 == 1 {
			if err := dec.Free(p); err != nil {
				return err
			}
		} else {
			w.bufs[dec] = append(w.bufs[dec], p)
		}
	}
	lens, err := seqLengths(dec) // 4 KiB: drawn at the map's narrowest
	if err := w.keep(dec, lens, err); err != nil {
		return err
	}
	if _, err := dec.Workspace("attention", 1<<20); err != nil {
		return err
	}
	if _, err := dec.Workspace("sampler", 512<<10); err != nil {
		return err
	}
	in, err := dec.HostAlloc(64 << 10)
	if err != nil {
		return err
	}
	w.hosts = append(w.hosts, in)
	evict := pages[len(pages)-1] // freed during the capture: the graph holds it
	w.bufs[dec] = w.bufs[dec][:len(w.bufs[dec])-1]
	w.graph, err = dec.WithCapture(alloc.CaptureOptions{Name: "decode-step"}, func() error {
		if err := dec.UploadHost(evict, 0, in, 0, 64<<10); err != nil {
			return err
		}
		if err := dec.Free(evict); err != nil {
			return err
		}
		for range 2 {
			if _, err := stepTemp(dec); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := w.captureBatches(8); err != nil {
		return err
	}

	for _, n := range []int64{12 << 20, 6 << 20, 700 << 10, 300 << 10} {
		b, err := prefillActivations(pre, n)
		if err := w.keep(pre, b, err); err != nil {
			return err
		}
	}
	done, err := prefillActivations(pre, 40<<20) // a finished batch: its segment stays cached
	if err != nil {
		return err
	}
	return pre.Free(done)
}

// captureBatches captures one decode graph per batch size, largest first,
// into a graph pool named "decode", after an eager warm-up at the largest
// batch: the graphs share the pool's memory, each keeping its output.
func (w *workload) captureBatches(largest int) error {
	dec := w.decoder
	warm, err := batchTemp(dec, largest)
	if err != nil {
		return err
	}
	if err := dec.Free(warm); err != nil {
		return err
	}
	w.pool = dec.NewGraphPool()
	w.pool.SetName("decode")
	for n := largest; n >= 1; n-- {
		g, err := dec.WithCapture(alloc.CaptureOptions{Pool: w.pool, Name: fmt.Sprintf("batch-%d", n)}, func() error {
			tmp, err := batchTemp(dec, n)
			if err != nil {
				return err
			}
			if _, err := batchOutput(dec, n); err != nil {
				return err
			}
			return dec.Free(tmp)
		})
		if err != nil {
			return err
		}
		w.batches = append(w.batches, g)
		if err := g.Launch(); err != nil {
			return err
		}
	}
	return nil
}

func (w *workload) close() {
	if w.graph != nil {
		w.graph.Close()
	}
	for _, g := range w.batches {
		g.Close()
	}
	if w.pool != nil {
		w.pool.Close()
	}
	for _, h := range w.hosts {
		h.Close()
	}
	for a, bs := range w.bufs {
		for _, b := range bs {
			a.Free(b)
		}
	}
	w.decoder.Close()
	w.prefill.Close()
}
