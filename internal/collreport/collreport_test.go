package collreport

import (
	"reflect"
	"testing"
)

// The crossover is the largest size at which the one-shot was no slower,
// there and at every smaller size measured with both; a later win of the
// one-shot past a loss does not count, nor do failed rows, rows of a
// forced variant, or sizes measured by one algorithm only.
func TestOneShotCrossover(t *testing.T) {
	row := func(ranks int, alg string, bytes int64, ns float64) Row {
		return Row{Ranks: ranks, Op: "allreduce", Alg: alg, Bytes: bytes, CapturedNs: ns}
	}
	rows := []Row{
		row(2, "oneshot", 1<<10, 10), row(2, "twoshot", 1<<10, 12),
		row(2, "oneshot", 1<<20, 20), row(2, "twoshot", 1<<20, 20), // a tie: one-shot
		row(2, "oneshot", 64<<20, 90), row(2, "twoshot", 64<<20, 50),
		row(2, "oneshot", 256<<20, 10), row(2, "twoshot", 256<<20, 50), // past a loss
		row(2, "oneshot", 2<<20, 1),                                // no two-shot figure
		row(4, "oneshot", 1<<10, 30), row(4, "twoshot", 1<<10, 20), // two-shot from the start
		{Ranks: 8, Op: "allreduce", Alg: "oneshot", Bytes: 1 << 10, CapturedNs: 1, Err: "failed"},
		{Ranks: 8, Op: "allreduce", Alg: "twoshot", Bytes: 1 << 10, CapturedNs: 2},
		{Ranks: 2, Op: "allreduce", Alg: "oneshot", Bytes: 64 << 20, CapturedNs: 1, Variant: "general"},
		{Ranks: 2, Op: "allgather", Bytes: 64 << 20, CapturedNs: 1},
	}
	want := map[int]int64{2: 1 << 20, 4: 0}
	if got := OneShotCrossover(rows); !reflect.DeepEqual(got, want) {
		t.Fatalf("OneShotCrossover = %v, want %v", got, want)
	}
}
