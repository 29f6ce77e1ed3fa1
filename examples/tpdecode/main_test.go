package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/internal/fakes"
	"github.com/capalloc/capalloc/symheap"
)

// The test binary is also the rank process of TestProcesses.
func TestMain(m *testing.M) {
	if os.Getenv(envRank) != "" {
		exitIf(rankProcess(os.Stdout))
	}
	os.Exit(m.Run())
}

// output is what run wrote, failing the test on its error.
func output(t *testing.T, run func(io.Writer) error) string {
	t.Helper()
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestGoroutines(t *testing.T) {
	out := output(t, func(w io.Writer) error { return runGoroutines(w, "cpu", 3, 20, 1) })
	if !strings.Contains(out, "every result checked") {
		t.Fatalf("output: %s", out)
	}
}

func TestProcesses(t *testing.T) {
	out := output(t, func(w io.Writer) error { return runProcesses(w, "cpu", 3, 20) })
	if got := strings.Count(out, "rank "); got != 3 {
		t.Fatalf("%d ranks reported, want 3: %s", got, out)
	}
}

// The same step, unchanged, on the device heap over the fake CUDA runtime:
// goroutine ranks, then process ranks that open each other's heaps through
// IPC handles exchanged in files.
func TestGoroutinesOnCUDAFake(t *testing.T) {
	fakes.CUDA.Lib(t)
	out := output(t, func(w io.Writer) error { return runGoroutines(w, "cuda", 2, 3, 1) })
	if !strings.Contains(out, "on cuda, 3 steps each way, every result checked") {
		t.Fatalf("output: %s", out)
	}
}

func TestProcessesOnCUDAFake(t *testing.T) {
	fakes.CUDA.Lib(t)
	out := output(t, func(w io.Writer) error { return runProcesses(w, "cuda", 2, 3) })
	if !strings.Contains(out, "2 ranks as processes on cuda: every result checked") {
		t.Fatalf("output: %s", out)
	}
}

// Ranks of one process spread over two fake CUDA devices: the device
// heap enables peer access between them at open, and the step checks
// every result; without peer access (FAKE_CUDA_NO_P2P) the run fails at
// open, naming the devices.
func TestGoroutinesOverDevicesOnCUDAFake(t *testing.T) {
	fakes.CUDA.Lib(t)
	t.Setenv("FAKE_CUDA_DEVICES", "2")
	out := output(t, func(w io.Writer) error { return runGoroutines(w, "cuda", 4, 3, 2) })
	if !strings.Contains(out, "4 ranks as goroutines on cuda over 2 devices, 3 steps each way, every result checked") {
		t.Fatalf("output: %s", out)
	}
	t.Setenv("FAKE_CUDA_NO_P2P", "0-1")
	err := runGoroutines(io.Discard, "cuda", 2, 3, 2)
	if !errors.Is(err, symheap.ErrNoPeerAccess) {
		t.Fatalf("without peer access: %v, want symheap.ErrNoPeerAccess", err)
	}
	if err := runGoroutines(io.Discard, "cpu", 2, 3, 2); err == nil {
		t.Fatal("-devices=2 on cpu: no error")
	}
}
