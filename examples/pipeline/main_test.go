package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The test binary is also the stage process of TestProcesses.
func TestMain(m *testing.M) {
	if os.Getenv(envStage) != "" {
		if err := stageProcess(os.Stdout); err != nil {
			os.Stderr.WriteString("pipeline stage: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestGoroutines(t *testing.T) {
	var out bytes.Buffer
	if err := runGoroutines(&out, "cpu", 30); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2 stages as goroutines on cpu (host heap), 30 steps replayed, every output checked") {
		t.Fatalf("output: %s", out.String())
	}
}

// The same stages, unchanged, on the device heap over the fake runtimes:
// the put and signals are this library's kernels, compiled for the host
// (every access checked), and every output is checked.
func TestGoroutinesOnFakes(t *testing.T) {
	for _, f := range []struct {
		backend string
		fake    *gpurttest.Fake
	}{
		{"cuda", &gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart", LibEnv: cuda.LibEnv}},
		{"hip", &gpurttest.Fake{Src: "hip/testdata/fakehip.c", Name: "libamdhip64", LibEnv: hip.LibEnv}},
	} {
		t.Run(f.backend, func(t *testing.T) {
			f.fake.Lib(t)
			var out bytes.Buffer
			if err := runGoroutines(&out, f.backend, 8); err != nil {
				t.Fatal(err)
			}
			if want := "2 stages as goroutines on " + f.backend + " (device heap), 8 steps replayed, every output checked"; !strings.Contains(out.String(), want) {
				t.Fatalf("output: %s, want %q", out.String(), want)
			}
		})
	}
}

func TestProcesses(t *testing.T) {
	var out bytes.Buffer
	if err := runProcesses(&out, 30); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "as processes on cpu, 30 steps replayed") {
		t.Fatalf("output: %s", out.String())
	}
}
