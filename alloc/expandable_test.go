package alloc_test

import (
	"fmt"
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

func newExpandable(t testing.TB, d alloc.Driver) *alloc.Allocator {
	t.Helper()
	a, err := alloc.New(d, alloc.Options{ExpandableSegments: true})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestExpandableTraceProbe(t *testing.T) {
	for _, tc := range []struct {
		name string
		tr   poolTrace
	}{{"project", newPoolTrace(100000, 64, 256, 64<<20, 1)}, {"inference", newInferenceTrace(100000)}} {
		for _, exp := range []bool{false, true} {
			d := newVMDriver(t, 0)
			a, err := alloc.New(d, alloc.Options{ExpandableSegments: exp})
			if err != nil {
				t.Fatal(err)
			}
			live := make([]alloc.Buffer, tc.tr.slots)
			if err := tc.tr.run(a, live); err != nil {
				t.Fatal(err)
			}
			st := a.Stats()
			m0 := d.count("MapMemory")
			u0 := d.count("UnmapMemory")
			if err := tc.tr.run(a, live); err != nil {
				t.Fatal(err)
			}
			st2 := a.Stats()
			mapped, _ := d.state()
			t.Logf("%s exp=%v: peak in use %d MiB reserved %d MiB ratio %.3f; run2 maps %d unmaps %d; mapped %d reserved %d",
				tc.name, exp, st.PeakInUse>>20, st.PeakReserved>>20, float64(st.PeakReserved)/float64(st.PeakInUse),
				d.count("MapMemory")-m0, d.count("UnmapMemory")-u0, mapped, st2.BytesReserved)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			mapped, res := d.state()
			t.Logf("after close mapped %d reservations %d", mapped, res)
		}
	}
}

func TestExpandableInvariantsDebug(t *testing.T) {
	tr := newPoolTrace(20000, 64, 256, 64<<20, 1)
	d := newVMDriver(t, 0)
	a := newExpandable(t, d)
	live := make([]alloc.Buffer, tr.slots)
	err := tr.runChecked(a, live, func(i int) error {
		if err := a.CheckPool(); err != nil {
			return fmt.Errorf("after op %d (%+v): %w", i, tr.ops[i], err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
