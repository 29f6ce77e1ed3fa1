package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/symheap"
)

// The test binary is also the rank process of TestProcesses.
func TestMain(m *testing.M) {
	if os.Getenv(envRank) != "" {
		exitIf(rankProcess(os.Stdout))
	}
	os.Exit(m.Run())
}

func TestGoroutines(t *testing.T) {
	var out bytes.Buffer
	if err := runGoroutines(&out, "cpu", 3, 20, 1); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "every result checked") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestProcesses(t *testing.T) {
	var out bytes.Buffer
	if err := runProcesses(&out, "cpu", 3, 20); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(out.String(), "rank "); got != 3 {
		t.Fatalf("%d ranks reported, want 3: %s", got, out.String())
	}
}

// cudaFake is the fake CUDA runtime the tests build (internal/gpurt's
// gpurttest): the device heap's kernels run in it, compiled for the host.
var cudaFake = gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart", LibEnv: cuda.LibEnv}

// The same step, unchanged, on the device heap over the fake CUDA runtime:
// goroutine ranks, then process ranks that open each other's heaps through
// IPC handles exchanged in files.
func TestGoroutinesOnCUDAFake(t *testing.T) {
	cudaFake.Lib(t)
	var out bytes.Buffer
	if err := runGoroutines(&out, "cuda", 2, 3, 1); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "on cuda, 3 steps each way, every result checked") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestProcessesOnCUDAFake(t *testing.T) {
	cudaFake.Lib(t)
	var out bytes.Buffer
	if err := runProcesses(&out, "cuda", 2, 3); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "2 ranks as processes on cuda: every result checked") {
		t.Fatalf("output: %s", out.String())
	}
}

// Ranks of one process spread over two fake CUDA devices: the device
// heap enables peer access between them at open, and the step checks
// every result; without peer access (FAKE_CUDA_NO_P2P) the run fails at
// open, naming the devices.
func TestGoroutinesOverDevicesOnCUDAFake(t *testing.T) {
	cudaFake.Lib(t)
	t.Setenv("FAKE_CUDA_DEVICES", "2")
	var out bytes.Buffer
	if err := runGoroutines(&out, "cuda", 4, 3, 2); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "4 ranks as goroutines on cuda over 2 devices, 3 steps each way, every result checked") {
		t.Fatalf("output: %s", out.String())
	}
	t.Setenv("FAKE_CUDA_NO_P2P", "0-1")
	err := runGoroutines(&out, "cuda", 2, 3, 2)
	if !errors.Is(err, symheap.ErrNoPeerAccess) {
		t.Fatalf("without peer access: %v, want symheap.ErrNoPeerAccess", err)
	}
	if err := runGoroutines(&out, "cpu", 2, 3, 2); err == nil {
		t.Fatal("-devices=2 on cpu: no error")
	}
}
