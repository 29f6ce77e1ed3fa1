package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// gcTraceLimit and gcTraceThreshold put the proactive release's threshold
// at 921 MiB: above the trace's peak in use (716 MiB) and what its
// partly used segments pin, below the peak reserved PyTorch's policy
// reaches on it (988 MiB). BENCHMARKS.md, "Proactive release", has the
// figures at lower thresholds too.
const (
	gcTraceLimit     = 2 << 30
	gcTraceThreshold = 0.45
)

// BenchmarkPoolTraceThreshold plays BenchmarkPoolTrace's trace under a
// 2 GiB memory limit, without and with Options.GCThreshold: time per
// trace op once warm, the most reserved after any op of a checked run
// (untimed) over the threshold's bytes, and driver allocations per run.
func BenchmarkPoolTraceThreshold(b *testing.B) {
	tr := newPoolTrace(100000, 64, 256, 64<<20, 1)
	for _, c := range []struct {
		name string
		gc   float64
	}{{"gc=off", 0}, {"gc=0.45", gcTraceThreshold}} {
		b.Run(c.name, func(b *testing.B) {
			a := cpuAllocatorWith(b, 64<<30, alloc.Options{MemoryLimit: gcTraceLimit, GCThreshold: c.gc})
			live := make([]alloc.Buffer, tr.slots)
			most, err := mostReserved(tr, a, live) // untimed: also fills the pool
			if err != nil {
				b.Fatal(err)
			}
			first := a.Stats()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tr.run(a, live); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := a.Stats()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(tr.ops)), "ns/trace-op")
			b.ReportMetric(float64(most)/(gcTraceThreshold*gcTraceLimit), "max-reserved/threshold")
			b.ReportMetric(float64(first.PeakInUse)/(gcTraceThreshold*gcTraceLimit), "peak-in-use/threshold")
			b.ReportMetric(float64(st.DriverAllocs-first.DriverAllocs)/float64(b.N), "driver-allocs/run")
		})
	}
}

// mostReserved plays tr once on a and returns the most bytes reserved
// after any of its ops.
func mostReserved(tr poolTrace, a *alloc.Allocator, live []alloc.Buffer) (int64, error) {
	var most int64
	err := tr.runChecked(a, live, func(int) error {
		most = max(most, a.Stats().BytesReserved)
		return nil
	})
	return max(most, a.Stats().BytesReserved), err
}
