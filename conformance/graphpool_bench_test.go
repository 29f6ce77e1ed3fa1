package conformance

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// The issue-30 benchmark, on the backend -backend or CAPALLOC_BACKEND
// selects (cpu when none is), so a GPU run measures it too (.ci/gpu): an engine captures one graph of a decode step
// per batch size, 1..decodeBatches, and replays one at a time. The step's
// temporaries grow with the batch (activations, attention scratch,
// logits); it reads a static input and writes a static output, made before
// the captures, as an engine's graph inputs and outputs are.
const (
	decodeBatches = 64
	decodeHidden  = 16 << 10 // activation bytes per sequence
)

// decodeStep records (or runs) one step at batch size n on a.
func decodeStep(a *alloc.Allocator, n int64, in, out alloc.Buffer) error {
	act, err := a.Alloc(n * decodeHidden)
	if err != nil {
		return err
	}
	scratch, err := a.Alloc(n * decodeHidden / 2)
	if err != nil {
		return err
	}
	logits, err := a.Alloc(n * decodeHidden / 4)
	if err != nil {
		return err
	}
	for _, op := range []func() error{
		func() error { return a.Copy(act, 0, in, 0, n*decodeHidden) },
		func() error { return a.Memset(scratch, 0, byte(n), scratch.Size()) },
		func() error { return a.Copy(logits, 0, act, 0, logits.Size()) },
		func() error { return a.Free(act) },
		func() error { return a.Free(scratch) },
		func() error { return a.Copy(out, 0, logits, 0, logits.Size()) },
		func() error { return a.Free(logits) },
	} {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// decodeGraphs is an allocator with the step's input and output, its
// graphs for batches lo..hi captured into gp (nil: no pool), largest
// first (smallest first when up), after one eager step at the largest
// batch (the warm-up).
type decodeGraphs struct {
	a       *alloc.Allocator
	in, out alloc.Buffer
	gs      []*alloc.Graph
	graphB  int64 // bytes the captures took from the driver
}

func newDecodeGraphs(b *testing.B, d driver.Driver, gp func(*alloc.Allocator) *alloc.GraphPool, lo, hi int64, up bool) *decodeGraphs {
	b.Helper()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e := &decodeGraphs{a: a}
	if e.in, err = a.Alloc(decodeBatches * decodeHidden); err != nil {
		b.Fatal(err)
	}
	if e.out, err = a.Alloc(decodeBatches * decodeHidden); err != nil {
		b.Fatal(err)
	}
	if err := decodeStep(a, hi, e.in, e.out); err != nil {
		b.Fatal(err)
	}
	var pool *alloc.GraphPool
	if gp != nil {
		pool = gp(a)
	}
	reserved := a.Stats().BytesReserved
	for i := hi; i >= lo; i-- {
		n := i
		if up {
			n = hi + lo - i
		}
		g, err := a.WithCapture(alloc.CaptureOptions{Pool: pool}, func() error { return decodeStep(a, n, e.in, e.out) })
		if err != nil {
			b.Fatal(err)
		}
		e.gs = append(e.gs, g)
	}
	e.graphB = a.Stats().BytesReserved - reserved
	return e
}

func (e *decodeGraphs) close(b *testing.B, gp *alloc.GraphPool) {
	b.Helper()
	for _, g := range e.gs {
		if err := g.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if gp != nil {
		if err := gp.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := e.a.Free(e.in); err != nil {
		b.Fatal(err)
	}
	if err := e.a.Free(e.out); err != nil {
		b.Fatal(err)
	}
	if err := e.a.Close(); err != nil {
		b.Fatal(err)
	}
}

// newDecodeDriver opens the selected backend (cpu when none is) for the
// benchmark; it is closed when the benchmark ends.
func newDecodeDriver(b *testing.B) driver.Driver {
	b.Helper()
	name := selected()
	if name == "" {
		name = "cpu"
	}
	open, err := Lookup(name)
	if err != nil {
		b.Fatal(err)
	}
	d := open(b)
	b.Cleanup(func() { d.Close() })
	return d
}

// BenchmarkGraphPoolDecode: capture=pool times capturing the 64 graphs
// into one pool (largest first; smallest first in
// capture=pool_smallest_first) and reports the graph-owned bytes against the largest
// graph's alone and the sum without a pool (issue 30's target: at most
// 1.1x the largest); replay times one replay of each of the 64 graphs in
// turn, with and without the pool.
func BenchmarkGraphPoolDecode(b *testing.B) {
	for _, up := range []bool{false, true} {
		name := "capture=pool"
		if up {
			name = "capture=pool_smallest_first"
		}
		b.Run(name, func(b *testing.B) {
			d := newDecodeDriver(b)
			largest := newDecodeGraphs(b, d, nil, decodeBatches, decodeBatches, false)
			largest.close(b, nil)
			sum := newDecodeGraphs(b, d, nil, 1, decodeBatches, false)
			sum.close(b, nil)
			var poolB int64
			b.ResetTimer()
			for range b.N {
				var gp *alloc.GraphPool
				e := newDecodeGraphs(b, d, func(a *alloc.Allocator) *alloc.GraphPool { gp = a.NewGraphPool(); return gp }, 1, decodeBatches, up)
				poolB = gp.Bytes()
				if e.graphB != 0 {
					b.Fatalf("the pool's captures took %d B from the driver", e.graphB)
				}
				for _, g := range e.gs {
					if len(g.Warnings()) > 0 {
						b.Fatal(g.Warnings())
					}
				}
				e.close(b, gp)
			}
			b.StopTimer()
			b.ReportMetric(float64(poolB), "pool-B")
			b.ReportMetric(float64(largest.graphB), "largest-graph-B")
			b.ReportMetric(float64(sum.graphB), "sum-no-pool-B")
			b.ReportMetric(float64(poolB)/float64(largest.graphB), "pool/largest")
			b.ReportMetric(float64(sum.graphB)/float64(largest.graphB), "sum/largest")
		})
	}
	for _, pooled := range []bool{false, true} {
		name := "replay=no_pool"
		if pooled {
			name = "replay=pool"
		}
		b.Run(name, func(b *testing.B) {
			d := newDecodeDriver(b)
			var gp *alloc.GraphPool
			mk := func(a *alloc.Allocator) *alloc.GraphPool { gp = a.NewGraphPool(); return gp }
			if !pooled {
				mk = nil
			}
			e := newDecodeGraphs(b, d, mk, 1, decodeBatches, false)
			b.ResetTimer()
			for range b.N {
				for _, g := range e.gs {
					if err := g.Launch(); err != nil {
						b.Fatal(err)
					}
				}
				if err := e.a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(e.gs)), "ns/replay")
			e.close(b, gp)
		})
	}
}
