package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// fragmentationTraces are the traces fragmentation is measured on: the
// project's, the inference mix, the size families with mixed lifetimes,
// and pytorch/pytorch#123548's pattern.
func fragmentationTraces() []struct {
	name string
	tr   poolTrace
} {
	return []struct {
		name string
		tr   poolTrace
	}{
		{"project", newPoolTrace(100000, 64, 256, 64<<20, 1)},
		{"inference", newInferenceTrace(100000)},
		{"families", newFamiliesTrace(100000)},
		{"fenced", newFencedTrace()},
	}
}

// BenchmarkFragmentation plays each trace once, from an empty pool, on
// the PyTorch model (torchModel), on the allocator with plain segments
// and with expandable segments, and reports peak reserved over peak in
// use and, on the fenced trace, how much the peak reserved grew per cycle
// over the second half of the cycles (0: bounded). Only the first run
// counts: run with -benchtime 1x.
func BenchmarkFragmentation(b *testing.B) {
	for _, tc := range fragmentationTraces() {
		half := halfOps(tc.tr)
		b.Run("trace="+tc.name+"/impl=pytorch", func(b *testing.B) {
			var m torchModel
			var mid int64
			m.runChecked(tc.tr, func(i int) {
				if i == half {
					mid = m.peakReserved
				}
			})
			reportFragmentation(b, m.peakReserved, m.peakIn, mid, tc.name)
		})
		for _, exp := range []bool{false, true} {
			name := "plain"
			if exp {
				name = "expandable"
			}
			b.Run("trace="+tc.name+"/impl="+name, func(b *testing.B) {
				d, _ := vmDriverFor(b)
				a, err := alloc.New(d, alloc.Options{ExpandableSegments: exp})
				if err != nil {
					b.Fatal(err)
				}
				defer a.Close()
				var mid int64
				live := make([]alloc.Buffer, tc.tr.slots)
				err = tc.tr.runChecked(a, live, func(i int) error {
					if i == half {
						mid = a.Stats().PeakReserved
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				st := a.Stats()
				reportFragmentation(b, st.PeakReserved, st.PeakInUse, mid, tc.name)
			})
		}
	}
}

// halfOps is the index of the op half-way through tr.
func halfOps(tr poolTrace) int { return len(tr.ops) / 2 }

func reportFragmentation(b *testing.B, peakReserved, peakInUse, mid int64, trace string) {
	b.ReportMetric(float64(peakReserved)/float64(peakInUse), "reserved/in-use")
	b.ReportMetric(float64(peakInUse)/(1<<20), "peak-in-use-MiB")
	if trace == "fenced" {
		b.ReportMetric(float64(peakReserved-mid)/(1<<20)/(fencedCycles/2), "MiB-grown/cycle")
	}
}
