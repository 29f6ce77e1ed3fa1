package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// symheap/autotable.go is what the recorded runs under testdata/gpu give
// (as .ci/run checks the docs' tables after gpurun regen): Auto's
// crossover comes from measurements, and a newly recorded run changes it
// only through regen.
func TestAutoTableMatchesRecordedRuns(t *testing.T) {
	root := filepath.Join("..", "..")
	names, runs, err := recordedRuns(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no recorded run under testdata/gpu")
	}
	want, err := autoTable(names, runs)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(autoTablePath(root))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s is stale: run go run ./cmd/gpurun regen and commit. The recorded runs give:\n%s\nthe file has:\n%s", autoTableFile, want, have)
	}
	if !bytes.Contains(want, []byte(`{Kind: "NVIDIA H200", Ranks: 8, MaxBytes: 262144, Run: "nvidia-h200-2026-11-27"}`)) {
		t.Errorf("the recorded H200 run is not the table's row for 8 ranks:\n%s", want)
	}
}

// A recorded run whose collbench measured the copy-engine rows faster
// from some size on reaches the table as a copy-engine row (what `gpurun
// record` then `regen` write); a small run over the fakes does not.
func TestAutoTableCarriesCopyEngineRows(t *testing.T) {
	row := func(op, variant string, bytes int64, ns float64) collRow {
		return collRow{Ranks: 4, Op: op, Variant: variant, Bytes: bytes, CapturedNs: ns}
	}
	rep := collReport{Device: "cuda:0 NVIDIA H200 (runtime 13.0, driver 13.0)", Rows: []collRow{
		row("allgather", "", 1<<20, 10), row("allgather", "copy", 1<<20, 20),
		row("allgather", "", 64<<20, 100), row("allgather", "copy", 64<<20, 80),
		row("alltoall", "", 64<<20, 100), row("alltoall", "copy", 64<<20, 120),
	}}
	step := func(small bool) []Step {
		r := rep
		r.Small = small
		return []Step{{Step: "collectives_bench", Figures: map[string]any{"report": r}}}
	}
	runs := map[string][]Step{"nvidia-h200-2027-01-01": step(false), "fakes": step(true)}
	out, err := autoTable([]string{"fakes", "nvidia-h200-2027-01-01"}, runs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`{Kind: "NVIDIA H200", Op: "allgather", Ranks: 4, MinBytes: 67108864, Run: "nvidia-h200-2027-01-01"},`)) {
		t.Errorf("no copy-engine row for the all-gather measured faster from 64 MiB:\n%s", out)
	}
	if bytes.Contains(out, []byte(`Op: "alltoall"`)) || bytes.Contains(out, []byte(`"fakes"`)) {
		t.Errorf("a row where the kernels were faster, or from a small run:\n%s", out)
	}
}
