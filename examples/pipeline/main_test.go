package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/internal/fakes"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/nccl"
)

// envMain makes the test binary run the command's main with its arguments.
const envMain = "PIPELINE_TEST_MAIN"

// The test binary is also the stage process of TestProcesses and
// TestNCCLOnFakes, and the command itself for TestNCCLUnavailable.
func TestMain(m *testing.M) {
	if os.Getenv(envMain) != "" {
		main()
		os.Exit(0)
	}
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
	fakes.Each(t, func(t *testing.T, backend string) {
		var out bytes.Buffer
		if err := runGoroutines(&out, backend, 8); err != nil {
			t.Fatal(err)
		}
		if want := "2 stages as goroutines on " + backend + " (device heap), 8 steps replayed, every output checked"; !strings.Contains(out.String(), want) {
			t.Fatalf("output: %s, want %q", out.String(), want)
		}
	})
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

// The NCCL transport over the stand-in library (nccl/testdata/fakenccl.c),
// built as NCCL for cuda and as RCCL for hip, on the fake runtimes: the
// stand-in moves the bytes of each Send to its Recv between the stage
// processes, in stream order through the runtime's host functions, so the
// captured steps carry real data at every replay and every output (and
// every output sent back) is checked.
func TestNCCLOnFakes(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "nccl", "testdata", "fakenccl.c"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		backend, vendor, libEnv string
		flags                   []string
		fake                    *gpurttest.Fake
	}{
		{"cuda", "NCCL", nccl.EnvLib, nil, fakes.CUDA},
		{"hip", "RCCL", nccl.EnvRCCLLib, []string{"-DFAKE_RCCL"}, fakes.HIP},
	} {
		t.Run(f.backend, func(t *testing.T) {
			runtime := f.fake.Lib(t)
			lib := filepath.Join(t.TempDir(), "libnccl-fake.so")
			gpurttest.BuildShared(t, lib, src, append([]string{"-O1"}, f.flags...)...)
			t.Setenv(f.libEnv, lib)
			t.Setenv("FAKE_NCCL_RUNTIME", runtime)
			t.Setenv(strings.ToUpper("FAKE_"+f.backend+"_DEVICES"), "2") // a device per rank
			var out bytes.Buffer
			if err := runNCCL(&out, f.backend, 12); err != nil {
				t.Fatal(err)
			}
			want := "2 stages as processes on " + f.backend + " over " + f.vendor + " 2.28.3 send/recv (" + lib + "), 12 steps replayed, every output checked"
			if !strings.Contains(out.String(), want) {
				t.Fatalf("output: %s, want %q", out.String(), want)
			}
		})
	}
}

// Without a library, -transport=nccl fails: the loader's typed error,
// naming the path it tried, and a non-zero exit; nothing runs on the
// heap instead.
func TestNCCLUnavailable(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-transport=nccl", "-backend=cuda", "-steps=2")
	cmd.Env = append(os.Environ(), envMain+"=1", nccl.EnvLib+"=/nonexistent/libnccl.so.2")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1; stderr: %s", err, stderr.String())
	}
	for _, want := range []string{
		"pipeline: -transport=nccl: backend unavailable: nccl: no usable NCCL library (set " + nccl.EnvLib,
		"/nonexistent/libnccl.so.2",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("stderr: %s, want %q", stderr.String(), want)
		}
	}
	if stdout.Len() != 0 {
		t.Fatalf("stdout: %s, want nothing", stdout.String())
	}
}
