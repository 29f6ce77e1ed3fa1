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

// decodeShape is the step's size: hidden activation bytes per sequence,
// and output, when not zero, the bytes of an output buffer the step
// allocates after its temporaries and keeps (a graph's output, alive
// until the graph is closed: 1 to 64 MiB of scratch and a small output
// each).
type decodeShape struct {
	hidden, output int64
}

var (
	decodeSmall   = decodeShape{hidden: decodeHidden}
	decodeOutputs = decodeShape{hidden: 1 << 20, output: 64 << 10}
)

// decodeStep records (or runs) one step at batch size n on a; it returns
// the step's output buffer (zero without one), which a capture leaves to
// its graph and an eager run frees.
func decodeStep(a *alloc.Allocator, sh decodeShape, n int64, in, out alloc.Buffer) (alloc.Buffer, error) {
	var bufs [3]alloc.Buffer // activations, attention scratch, logits
	for i, size := range [3]int64{n * sh.hidden, n * sh.hidden / 2, n * sh.hidden / 4} {
		var err error
		if bufs[i], err = a.Alloc(size); err != nil {
			return alloc.Buffer{}, err
		}
	}
	act, scratch, logits := bufs[0], bufs[1], bufs[2]
	var res alloc.Buffer
	if sh.output > 0 {
		var err error
		if res, err = a.Alloc(sh.output); err != nil {
			return alloc.Buffer{}, err
		}
	}
	for _, op := range []func() error{
		func() error { return a.Copy(act, 0, in, 0, min(act.Size(), in.Size())) },
		func() error { return a.Memset(scratch, 0, byte(n), scratch.Size()) },
		func() error { return a.Copy(logits, 0, act, 0, logits.Size()) },
		func() error { return a.Free(act) },
		func() error { return a.Free(scratch) },
		func() error { return a.Copy(out, 0, logits, 0, min(logits.Size(), out.Size())) },
		func() error { return a.Free(logits) },
	} {
		if err := op(); err != nil {
			return alloc.Buffer{}, err
		}
	}
	return res, nil
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

func newDecodeGraphs(b *testing.B, d driver.Driver, sh decodeShape, gp func(*alloc.Allocator) *alloc.GraphPool, lo, hi int64, up bool) *decodeGraphs {
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
	res, err := decodeStep(a, sh, hi, e.in, e.out) // the warm-up
	if err != nil {
		b.Fatal(err)
	}
	if sh.output > 0 {
		if err := a.Free(res); err != nil {
			b.Fatal(err)
		}
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
		g, err := a.WithCapture(alloc.CaptureOptions{Pool: pool}, func() error { _, err := decodeStep(a, sh, n, e.in, e.out); return err })
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
	d := selectedFactory(b)(b)
	b.Cleanup(func() { d.Close() })
	return d
}

// selectedFactory is the Factory of the selected backend (cpu when none
// is); an unavailable one fails b.
func selectedFactory(b *testing.B) Factory {
	b.Helper()
	name := selected()
	if name == "" {
		name = "cpu"
	}
	open, err := Lookup(name)
	if err != nil {
		b.Fatal(err)
	}
	return open
}

// BenchmarkGraphPoolDecode: capture=pool times capturing the 64 graphs
// into one pool (largest first; smallest first in
// capture=pool_smallest_first) and reports the graph-owned bytes against the largest
// graph's alone and the sum without a pool (issue 30's target: at most
// 1.1x the largest); step=outputs is the same with decodeOutputs' steps
// (1 to 64 MiB of scratch, a small output kept by each graph;
// its pool's bytes include what the captures took from the driver);
// replay times one replay of each of the 64 graphs in turn, with and
// without the pool.
func BenchmarkGraphPoolDecode(b *testing.B) {
	for _, shape := range []struct {
		suffix string
		sh     decodeShape
	}{{"", decodeSmall}, {"/step=outputs", decodeOutputs}} {
		for _, up := range []bool{false, true} {
			name := "capture=pool"
			if up {
				name = "capture=pool_smallest_first"
			}
			b.Run(name+shape.suffix, func(b *testing.B) { benchPoolCapture(b, shape.sh, up) })
		}
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
			e := newDecodeGraphs(b, d, decodeSmall, mk, 1, decodeBatches, false)
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

// benchPoolCapture is BenchmarkGraphPoolDecode's capture case.
func benchPoolCapture(b *testing.B, sh decodeShape, up bool) {
	d := newDecodeDriver(b)
	largest := newDecodeGraphs(b, d, sh, nil, decodeBatches, decodeBatches, false)
	largest.close(b, nil)
	var sumB int64
	if sh.output == 0 { // with outputs the sum is 64 graphs of up to 112 MiB: not made
		sum := newDecodeGraphs(b, d, sh, nil, 1, decodeBatches, false)
		sum.close(b, nil)
		sumB = sum.graphB
	}
	var poolB int64
	b.ResetTimer()
	for range b.N {
		var gp *alloc.GraphPool
		e := newDecodeGraphs(b, d, sh, func(a *alloc.Allocator) *alloc.GraphPool { gp = a.NewGraphPool(); return gp }, 1, decodeBatches, up)
		poolB = gp.Bytes() + e.graphB
		if e.graphB != 0 && sh.output == 0 {
			b.Fatalf("the pool's captures took %d B from the driver", e.graphB)
		}
		for _, g := range e.gs {
			if len(g.Warnings()) > 0 && sh.output == 0 {
				b.Fatal(g.Warnings())
			}
		}
		e.close(b, gp)
	}
	b.StopTimer()
	b.ReportMetric(float64(poolB), "pool-B")
	b.ReportMetric(float64(largest.graphB), "largest-graph-B")
	b.ReportMetric(float64(sumB), "sum-no-pool-B")
	b.ReportMetric(float64(poolB)/float64(largest.graphB), "pool/largest")
	b.ReportMetric(float64(sumB)/float64(largest.graphB), "sum/largest")
}
