package alloc_test

// Benchmarks of the allocator on the CPU backend, with the baselines named in
// BENCHMARKS.md measured in the same run.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

var sink []byte

func newBenchAllocator(b *testing.B) *alloc.Allocator {
	b.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := a.Close(); err != nil {
			b.Error(err)
		}
		d.Close()
	})
	return a
}

// reportCPU reports the process's CPU time since c0 per op, and per unit
// when perOp (units in one op) is above 1: on a shared machine it moves
// less than ns/op when other work takes the cores (BENCHMARKS.md, issue 29).
func reportCPU(b *testing.B, c0 time.Duration, perOp int, unit string) {
	d := float64((processCPU() - c0).Nanoseconds())
	b.ReportMetric(d/float64(b.N), "cpu-ns/op")
	if perOp > 1 {
		b.ReportMetric(d/float64(b.N*perOp), "cpu-ns/"+unit)
	}
}

var benchSizes = []struct {
	name string
	n    int64
}{{"size=256B", 256}, {"size=64KiB", 64 << 10}, {"size=4MiB", 4 << 20}}

func BenchmarkAllocFree(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name+"/impl=capalloc", func(b *testing.B) {
			a := newBenchAllocator(b)
			warm, _ := a.Alloc(s.n) // the pool is warm, as in an engine's steady state
			a.Free(warm)
			b.ReportAllocs()
			b.ResetTimer()
			c0 := processCPU()
			for i := 0; i < b.N; i++ {
				buf, err := a.Alloc(s.n)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, c0, 1, "")
		})
		b.Run(s.name+"/impl=make", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sink = make([]byte, s.n)
			}
		})
		b.Run(s.name+"/impl=syncpool", func(b *testing.B) {
			p := sync.Pool{New: func() any { s := make([]byte, s.n); return &s }}
			b.ReportAllocs()
			c0 := processCPU()
			for i := 0; i < b.N; i++ {
				v := p.Get().(*[]byte)
				sink = *v
				p.Put(v)
			}
			reportCPU(b, c0, 1, "")
		})
	}
}

const bulk = 64 << 20

func BenchmarkTransfer64MiB(b *testing.B) {
	src := make([]byte, bulk)
	for i := range src {
		src[i] = byte(i)
	}
	b.Run("impl=copy", func(b *testing.B) {
		dst := make([]byte, bulk)
		copy(dst, src) // untimed: the first write to fresh pages faults them in
		b.SetBytes(bulk)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			copy(dst, src)
		}
	})
	b.Run("impl=Upload", func(b *testing.B) {
		a := newBenchAllocator(b)
		buf, _ := a.Alloc(bulk)
		_ = a.Upload(buf, 0, src) // untimed: fault the device buffer's pages in
		timeBulk(b, func() error { return a.Upload(buf, 0, src) })
		a.Free(buf)
	})
	b.Run("impl=Download", func(b *testing.B) {
		a := newBenchAllocator(b)
		buf, _ := a.Alloc(bulk)
		dst := make([]byte, bulk)
		_ = a.Upload(buf, 0, src)
		_ = a.Download(dst, buf, 0) // untimed: fault both sides' pages in
		timeBulk(b, func() error { return a.Download(dst, buf, 0) })
		a.Free(buf)
	})
	b.Run("impl=UploadHost+Sync", func(b *testing.B) {
		a := newBenchAllocator(b)
		buf, _ := a.Alloc(bulk)
		h, _ := a.HostAlloc(bulk)
		copy(h.Bytes(), src)
		timeBulk(b, func() error {
			if err := a.UploadHost(buf, 0, h, 0, bulk); err != nil {
				return err
			}
			return a.Synchronize()
		})
		a.Free(buf)
		h.Close()
	})
}

// timeBulk runs op, a transfer of bulk bytes, b.N times on a reset
// timer, failing the benchmark at op's first error, and stops the timer.
func timeBulk(b *testing.B, op func() error) {
	b.SetBytes(bulk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// BenchmarkReplay1000 compares 1,000 small stream operations issued eagerly
// with the same operations replayed from a captured graph; ns/op is per
// batch of 1,000, ns/stream-op per operation.
func BenchmarkReplay1000(b *testing.B) {
	const ops = 1000
	program := func(a *alloc.Allocator, x, y alloc.Buffer) error {
		for i := 0; i < ops; i++ {
			var err error
			if i%2 == 0 {
				err = a.Memset(x, 0, byte(i), 256)
			} else {
				err = a.Copy(y, 0, x, 0, 256)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	setup := func(b *testing.B) (*alloc.Allocator, alloc.Buffer, alloc.Buffer) {
		a := newBenchAllocator(b)
		x, _ := a.Alloc(256)
		y, _ := a.Alloc(256)
		return a, x, y
	}
	b.Run("impl=eager", func(b *testing.B) {
		a, x, y := setup(b)
		b.ResetTimer()
		c0 := processCPU()
		for i := 0; i < b.N; i++ {
			if err := program(a, x, y); err != nil {
				b.Fatal(err)
			}
			if err := a.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ops), "ns/stream-op")
		reportCPU(b, c0, ops, "stream-op")
		a.Free(x)
		a.Free(y)
	})
	b.Run("impl=graph", func(b *testing.B) {
		a, x, y := setup(b)
		g, err := a.WithCapture(alloc.CaptureOptions{}, func() error { return program(a, x, y) })
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		c0 := processCPU()
		for i := 0; i < b.N; i++ {
			if err := g.Launch(); err != nil {
				b.Fatal(err)
			}
			if err := a.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*ops), "ns/stream-op")
		reportCPU(b, c0, ops, "stream-op")
		b.StopTimer()
		g.Close()
		a.Free(x)
		a.Free(y)
	})
}

func ExampleAllocator_WithCapture() {
	d, _ := cpu.New(cpu.Options{})
	defer d.Close()
	a, _ := alloc.New(d, alloc.Options{})
	defer a.Close()

	in, _ := a.HostAlloc(4)  // pinned: a captured copy reads it at every replay
	out, _ := a.HostAlloc(4) // pinned: every replay writes it
	defer in.Close()
	defer out.Close()
	x, _ := a.Alloc(4) // reserved before capture
	defer a.Free(x)

	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		if err := a.UploadHost(x, 0, in, 0, 4); err != nil {
			return err
		}
		if err := a.Memset(x, 0, 0xff, 1); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, x, 0, 4)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	for step := byte(1); step <= 2; step++ {
		copy(in.Bytes(), []byte{step, step, step, step}) // fresh input, same graph
		g.Launch()
		a.Synchronize()
		fmt.Println(out.Bytes(), "allocations in capture:", g.CaptureAllocCount())
	}
	// Output:
	// [255 1 1 1] allocations in capture: 0
	// [255 2 2 2] allocations in capture: 0
}

// BenchmarkPoolTrace plays the fragmentation trace of issue 12 (1e5 ops,
// sizes log-uniform from 256 B to 64 MiB, about 64 live, a fixed seed) on
// one allocator, uncapped and under a 2 GiB device cap (the issue's), and
// under 1 GiB, about 1.4x the trace's peak in use, where the pool must give
// segments back. It reports time per trace op, the fragmentation ratio of
// the first run (peak reserved over peak in use) and driver allocations
// per run once the pool is warm.
func BenchmarkPoolTrace(b *testing.B) {
	tr := newPoolTrace(100000, 64, 256, 64<<20, 1)
	for _, c := range []struct {
		name  string
		limit int64
	}{{"cap=none", 64 << 30}, {"cap=2GiB", 2 << 30}, {"cap=960MiB", 960 << 20}} {
		b.Run(c.name, func(b *testing.B) {
			d, err := cpu.New(cpu.Options{MemoryLimit: c.limit})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			a, err := alloc.New(d, alloc.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			live := make([]alloc.Buffer, tr.slots)
			if err := tr.run(a, live); err != nil { // untimed: the first run fills the pool
				b.Fatal(err)
			}
			first := a.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			c0 := processCPU()
			for i := 0; i < b.N; i++ {
				if err := tr.run(a, live); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCPU(b, c0, len(tr.ops), "trace-op")
			st := a.Stats()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tr.ops)), "ns/trace-op")
			b.ReportMetric(float64(first.PeakReserved)/float64(first.PeakInUse), "reserved/in-use")
			b.ReportMetric(float64(first.PeakInUse)/(1<<20), "peak-in-use-MiB")
			b.ReportMetric(float64(st.DriverAllocs-first.DriverAllocs)/float64(b.N), "driver-allocs/run")
		})
	}
}

// BenchmarkAllocFreeParallel is the 64 KiB pair from every goroutine of
// RunParallel at once: all on one shared allocator, or each goroutine on
// an allocator (and stream) of its own over the same driver. ns/op is wall
// time per pair over all goroutines: compare -cpu=1 with -cpu=2.
func BenchmarkAllocFreeParallel(b *testing.B) {
	const n = 64 << 10
	pairs := func(b *testing.B, a *alloc.Allocator, pb *testing.PB) {
		for pb.Next() {
			buf, err := a.Alloc(n)
			if err != nil {
				b.Error(err)
				return
			}
			if err := a.Free(buf); err != nil {
				b.Error(err)
				return
			}
		}
	}
	b.Run("allocators=shared", func(b *testing.B) {
		a := newBenchAllocator(b)
		b.ReportAllocs()
		c0 := processCPU()
		b.RunParallel(func(pb *testing.PB) { pairs(b, a, pb) })
		reportCPU(b, c0, 1, "")
	})
	b.Run("allocators=per-goroutine", func(b *testing.B) {
		d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			a, err := alloc.New(d, alloc.Options{})
			if err != nil {
				b.Error(err)
				return
			}
			defer a.Close()
			pairs(b, a, pb)
		})
	})
}

// benchPairs times b.N Alloc+Free pairs of n bytes on a warm pool.
func benchPairs(b *testing.B, a *alloc.Allocator, n int64) {
	warm, _ := a.Alloc(n) // the pool is warm, as in an engine's steady state
	a.Free(warm)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf, err := a.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}
