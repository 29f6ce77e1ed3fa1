package cpu_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// Enqueue cost of a small memset; the queue runs when full (every 65536
// ops), so execution is amortized in.
func BenchmarkMemsetAsync(b *testing.B) {
	d, s := newDriverStream(b, cpu.Options{})
	p := val[driver.DevicePtr](b)(d.Malloc(256))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.MemsetAsync(p, 1, 64, s); err != nil {
			b.Fatal(err)
		}
	}
	ok(b, d.StreamSynchronize(s))
}

func BenchmarkCopyHtoDAsync(b *testing.B) {
	d, s := newDriverStream(b, cpu.Options{})
	p := val[driver.DevicePtr](b)(d.Malloc(256))
	h := host(b, d, 64)
	b.ReportAllocs()
	for b.Loop() {
		if err := d.CopyHtoDAsync(p, h, s); err != nil {
			b.Fatal(err)
		}
	}
	ok(b, d.StreamSynchronize(s))
}

// A stream-ordered Alloc/Free pair, synchronizing every 256 pairs so the
// frees run.
func BenchmarkMallocFreeAsync(b *testing.B) {
	d, s := newDriverStream(b, cpu.Options{})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p, err := d.MallocAsync(4096, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.FreeAsync(p, s); err != nil {
			b.Fatal(err)
		}
		if i++; i%256 == 0 {
			ok(b, d.StreamSynchronize(s))
		}
	}
	ok(b, d.StreamSynchronize(s))
}

func BenchmarkCopyHtoD64MiB(b *testing.B) {
	const n = 64 << 20
	d, s := newDriverStream(b, cpu.Options{})
	p := val[driver.DevicePtr](b)(d.Malloc(n))
	src := bytes.Repeat([]byte{1}, n)
	b.SetBytes(n)
	for b.Loop() {
		if err := d.CopyHtoD(p, src, s); err != nil {
			b.Fatal(err)
		}
	}
}

// The baseline for BenchmarkCopyHtoD64MiB.
func BenchmarkGoCopy64MiB(b *testing.B) {
	const n = 64 << 20
	dst, src := make([]byte, n), bytes.Repeat([]byte{1}, n)
	b.SetBytes(n)
	for b.Loop() {
		copy(dst, src)
	}
}

const opsPerIteration = 100

// 100 small memsets enqueued one by one and run, versus the same 100 as one
// graph launch: replay is one queue entry.
func BenchmarkEager100Memsets(b *testing.B) {
	d, s := newDriverStream(b, cpu.Options{})
	p := val[driver.DevicePtr](b)(d.Malloc(256))
	b.ReportAllocs()
	for b.Loop() {
		for range opsPerIteration {
			if err := d.MemsetAsync(p, 1, 64, s); err != nil {
				b.Fatal(err)
			}
		}
		ok(b, d.StreamSynchronize(s))
	}
}

func BenchmarkGraphReplay100Memsets(b *testing.B) {
	d, s := newDriverStream(b, cpu.Options{})
	p := val[driver.DevicePtr](b)(d.Malloc(256))
	ok(b, d.BeginCapture(s, alloc.Global))
	for range opsPerIteration {
		ok(b, d.MemsetAsync(p, 1, 64, s))
	}
	g := val[driver.GraphHandle](b)(d.EndCapture(s))
	e := val[driver.GraphExec](b)(d.GraphInstantiate(g, false))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.GraphLaunch(e, s); err != nil {
			b.Fatal(err)
		}
		ok(b, d.StreamSynchronize(s))
	}
}

// Many goroutines, one stream each.
func BenchmarkMemsetAsyncParallel(b *testing.B) {
	d := newDriver(b, cpu.Options{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s, err := d.CreateStream()
		if err != nil {
			b.Error(err)
			return
		}
		p, err := d.Malloc(256)
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if err := d.MemsetAsync(p, 1, 64, s); err != nil {
				b.Error(err)
				return
			}
		}
		_ = d.StreamSynchronize(s)
	})
}

// BenchmarkCapture records n memsets into a capture and ends it; the
// figure is per recorded operation, so a cost linear in n is flat across
// the sizes (issue 12).
func BenchmarkCapture(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("ops=%d", n), func(b *testing.B) {
			d, s := newDriverStream(b, cpu.Options{})
			p := val[driver.DevicePtr](b)(d.Malloc(4096))
			b.ResetTimer()
			for range b.N {
				if err := d.BeginCapture(s, alloc.ThreadLocal); err != nil {
					b.Fatal(err)
				}
				for i := range n {
					if err := d.MemsetAsync(p, byte(i), 64, s); err != nil {
						b.Fatal(err)
					}
				}
				g, err := d.EndCapture(s)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.GraphDestroy(g); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/captured-op")
		})
	}
}
