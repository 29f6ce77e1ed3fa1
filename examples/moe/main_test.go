package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/internal/fakes"
)

func TestGoroutines(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "cpu", 40); err != nil {
		t.Fatal(err)
	}
	if want := "4 experts as goroutines on cpu (host heap): dispatch, expert and combine captured once, 40 steps replayed with new routing, every token checked"; !strings.Contains(out.String(), want) {
		t.Fatalf("output: %s, want %q", out.String(), want)
	}
}

// The same layer, unchanged, on the device heap over the fake runtimes:
// the all-to-alls are this library's kernel, compiled for the host (every
// access checked), reading the counts at every replay.
func TestGoroutinesOnFakes(t *testing.T) {
	fakes.Each(t, func(t *testing.T, backend string) {
		var out bytes.Buffer
		if err := run(&out, backend, 8); err != nil {
			t.Fatal(err)
		}
		if want := "4 experts as goroutines on " + backend + " (device heap)"; !strings.Contains(out.String(), want) {
			t.Fatalf("output: %s, want %q", out.String(), want)
		}
	})
}

// The router covers what a captured AllToAllV must serve: within the
// steps the tests run, an expert that receives nothing and a rank that
// sends nothing.
func TestRoutingCoversEmptyCounts(t *testing.T) {
	var idle, silent bool
	for k := range 8 {
		recv := [experts]int{}
		for r := range experts {
			es := routed(k, r)
			silent = silent || len(es) == 0
			for _, e := range es {
				recv[e]++
			}
		}
		for _, n := range recv {
			idle = idle || n == 0
		}
	}
	if !idle || !silent {
		t.Fatalf("in 8 steps: an expert with no tokens: %v, a rank with none: %v", idle, silent)
	}
}
