package collreport

import (
	"reflect"
	"testing"
)

// The copy engines' threshold is the smallest size from which the copy
// rows were faster than the kernel rows, there and at every larger size
// measured with both; a win below a loss does not count, nor do ties,
// failed rows, general-variant rows or sizes measured one way only.
func TestCopyEngineFrom(t *testing.T) {
	row := func(op string, ranks int, variant string, bytes int64, ns float64) Row {
		return Row{Ranks: ranks, Op: op, Variant: variant, Bytes: bytes, CapturedNs: ns}
	}
	rows := []Row{
		row("allgather", 2, "", 1<<10, 10), row("allgather", 2, "copy", 1<<10, 5), // a win below a loss
		row("allgather", 2, "", 1<<20, 10), row("allgather", 2, "copy", 1<<20, 20),
		row("allgather", 2, "", 64<<20, 90), row("allgather", 2, "copy", 64<<20, 50),
		row("allgather", 2, "", 256<<20, 300), row("allgather", 2, "copy", 256<<20, 200),
		row("allgather", 2, "copy", 512<<20, 1000),                              // no kernel figure
		row("allgather", 2, "general", 256<<20, 1),                              // a forced kernel variant
		row("alltoall", 2, "", 1<<10, 10), row("alltoall", 2, "copy", 1<<10, 5), // faster everywhere
		row("alltoall", 2, "", 1<<20, 10), row("alltoall", 2, "copy", 1<<20, 5),
		row("alltoall", 4, "", 1<<20, 10), row("alltoall", 4, "copy", 1<<20, 10), // a tie: the kernels
		row("allgather", 8, "", 1<<20, 10),
		{Ranks: 8, Op: "allgather", Variant: "copy", Bytes: 1 << 20, CapturedNs: 1, Err: "failed"},
		row("allreduce", 2, "copy", 1<<20, 1),
	}
	want := map[string]map[int]int64{"allgather": {2: 64 << 20}, "alltoall": {2: 1 << 10}}
	if got := CopyEngineFrom(rows); !reflect.DeepEqual(got, want) {
		t.Fatalf("CopyEngineFrom = %v, want %v", got, want)
	}
	if got := CopyEngineFrom(rows[:2]); len(got["allgather"]) != 1 {
		t.Fatalf("a single faster size: %v", got)
	}
}
