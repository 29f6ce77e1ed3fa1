package nccl_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/nccl"
)

// NCCL all-reduce on one GPU (one rank: the collective's launch and
// bookkeeping cost, not a transfer), per operation including the
// synchronize: eager (each call enqueued) against a captured graph of 10
// all-reduces replayed (per all-reduce). Skipped without a GPU and NCCL.
//
//	go test ./nccl -run '^$' -bench . -count 6
func BenchmarkGPUAllReduce(b *testing.B) {
	_, a, c := oneRankOnGPU(b)
	const perGraph = 10
	for _, s := range []struct {
		name string
		n    int64
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		buf, err := a.Alloc(s.n)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = a.Free(buf) })
		reduce := func() error { return c.AllReduce(a, buf, buf, s.n/4, nccl.Float32, nccl.Sum) }
		b.Run(s.name+"/eager", func(b *testing.B) {
			for range b.N {
				for range perGraph {
					if err := reduce(); err != nil {
						b.Fatal(err)
					}
				}
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perGraph), "ns/allreduce")
		})
		b.Run(s.name+"/captured", func(b *testing.B) {
			g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
				for range perGraph {
					if err := reduce(); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			b.ResetTimer()
			for range b.N {
				if err := g.Launch(); err != nil {
					b.Fatal(err)
				}
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perGraph), "ns/allreduce")
		})
	}
}
