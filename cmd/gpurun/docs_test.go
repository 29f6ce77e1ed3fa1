package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docs/gpu-kit.md's table of steps is the kit's: the same steps in the
// same order with the same timeouts on cuda (a step added, moved or
// retimed without the table fails here).
func TestStepsTableIsTheKits(t *testing.T) {
	b, err := os.ReadFile("../../docs/gpu-kit.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| step | what runs | proves | timeout |\n|---|---|---|---|\n")
	if !ok {
		t.Fatal("docs/gpu-kit.md has no steps table")
	}
	var rows [][]string
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		rows = append(rows, []string{strings.TrimSpace(cells[0]), strings.TrimSpace(cells[len(cells)-1])})
	}
	defs := steps(config{Backend: "cuda"})
	if len(rows) != len(defs) {
		t.Fatalf("docs/gpu-kit.md lists %d steps, the kit runs %d", len(rows), len(defs))
	}
	for i, d := range defs {
		if want := []string{d.Name, strconv.Itoa(int(d.Timeout/time.Second)) + " s"}; rows[i][0] != want[0] || rows[i][1] != want[1] {
			t.Errorf("docs/gpu-kit.md row %d: %v; the kit's step %d: %v", i+1, rows[i], i+1, want)
		}
	}
}
