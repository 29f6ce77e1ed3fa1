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
