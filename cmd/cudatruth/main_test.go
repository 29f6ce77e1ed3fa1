package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/internal/fakes"
)

// hangEnv makes a child case hang, to test that a hang is recorded.
const hangEnv = "CUDATRUTH_TEST_HANG"

// TestMain lets the test binary run cases as the tool's own children do.
func TestMain(m *testing.M) {
	if spec := os.Getenv(caseEnv); spec != "" {
		if os.Getenv(hangEnv) != "" {
			time.Sleep(time.Hour)
		}
		os.Exit(child(spec, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// recorded is a table taken on a GPU by `cudatruth -json`.
type recorded struct {
	GPU, Driver, Runtime, Date, Command string
	Results                             []truthResult
}

// TestRecordedTableMatchesCPU checks the cpu backend against what an H100
// did (testdata, recorded with this tool): every case where the emulation
// differs from the runtime must be a known, explained difference. This
// runs everywhere, so the emulation cannot drift from the measured rules
// between GPU sessions.
func TestRecordedTableMatchesCPU(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			var rec recorded
			require.NoError(t, json.Unmarshal(b, &rec))
			// Whole rows of known ops: every mode, caller and stream kind.
			// Ops added since the recording (managed memory, prefetch,
			// host registration) are absent from it, and the guard is
			// strict for them until a table records them.
			ops := map[string]bool{}
			for _, r := range rec.Results {
				require.Contains(t, truthOps, r.Case.Op, "a known op")
				ops[r.Case.Op] = true
			}
			require.Len(t, rec.Results, len(truthModes)*len(truthCallers)*len(ops)*2, "whole rows")
			compared := 0
			for _, r := range rec.Results {
				if r.Skipped != "" {
					continue
				}
				cudaV := verdict(r.Code != 0, r.Invalidated())
				cpuV, _ := cpuVerdict(r.Case)
				if cpuV == verdictNA {
					continue
				}
				compared++
				if cudaV != cpuV {
					assert.NotEmpty(t, knownDifference(r.Case, cudaV, cpuV),
						"%s: %s runtime %s (code %d), cpu backend %s", r.Case, rec.GPU, cudaV, r.Code, cpuV)
				}
			}
			assert.Greater(t, compared, 300, "most cases exist on both sides")
		})
	}
}

// The rules the allocator's design rests on, read off the recorded table:
// if a new table contradicts one, the design must be revisited, not the
// test.
func TestRecordedTableRules(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "h100-driver580-cuda13.0.json"))
	require.NoError(t, err)
	var rec recorded
	require.NoError(t, json.Unmarshal(b, &rec))
	at := map[string]truthResult{}
	for _, r := range rec.Results {
		at[r.Case.String()] = r
	}
	v := func(name string) string {
		r, ok := at[name]
		require.True(t, ok, name)
		return verdict(r.Code != 0, r.Invalidated())
	}
	for _, m := range truthModes {
		for _, caller := range truthCallers {
			for _, kind := range []string{"blocking", "nonblocking"} {
				c := m + "/" + caller + "/" + kind + "/"
				assert.Equal(t, verdictInvalidates, v(c+"graph_launch_capturing"), "a graph launch is never captured")
				assert.Equal(t, verdictInvalidates, v(c+"sync_capturing"))
				assert.Equal(t, verdictOK, v(c+"pool_alloc_capturing"))
				assert.Equal(t, verdictOK, v(c+"copy_pinned_capturing"))
			}
			// Relaxed interaction makes the pool and graph calls legal.
			for _, op := range []string{"pool_alloc_other", "free_async_other", "graph_instantiate", "graph_exec_destroy"} {
				assert.Equal(t, verdictOK, v(m+"/other_relaxed/nonblocking/"+op), op)
			}
		}
	}
	assert.Equal(t, verdictInvalidates, v("global/other/nonblocking/pool_alloc_other"), "why internal/gpurt/relaxed.go exists")
	assert.Equal(t, verdictOK, v("global/other/nonblocking/copy_pageable_sync"), "non-blocking streams")
	assert.Equal(t, verdictInvalidates, v("global/other/blocking/copy_pageable_sync"), "blocking streams: 906")
}

func TestHangIsRecorded(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	t.Setenv(hangEnv, "1")
	start := time.Now()
	res, v := runChild(self, truthCase{Mode: "global", Caller: "same", Op: "malloc"}, 300*time.Millisecond)
	assert.Nil(t, res)
	assert.Equal(t, verdictHang, v)
	assert.Less(t, time.Since(start), 30*time.Second, "the hung child was killed")
}

func TestCaseRoundTrip(t *testing.T) {
	cases, err := allCases("both", "")
	require.NoError(t, err)
	require.Len(t, cases, 2*len(truthModes)*len(truthCallers)*len(truthOps))
	for _, c := range cases {
		got, err := decodeCase(encodeCase(c))
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	_, err = decodeCase("global/same/sideways/malloc")
	require.Error(t, err)
	_, err = allCases("purple", "")
	require.Error(t, err)
	_, err = allCases("both", "no-such-op")
	require.Error(t, err)
}

// TestOverFakeRuntime runs the tool end to end over the fake libcudart
// (cuda/testdata/fakecudart.c on internal/fakegpu/core.c, which models the
// measured rules): children, JSON, and the comparison with the cpu backend.
func TestOverFakeRuntime(t *testing.T) {
	fakes.CUDA.Lib(t) // skips without gcc and g++
	var stdout, stderr bytes.Buffer
	rc := run([]string{"-json", "-compare", "-streams=nonblocking", "-only=global/", "-timeout=20s"}, &stdout, &stderr)
	require.Equal(t, 0, rc, "stderr: %s", stderr.String())
	var rows []Row
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rows))
	require.Len(t, rows, len(truthCallers)*len(truthOps))
	got := map[string]string{}
	for _, r := range rows {
		got[r.Case] = r.CUDA
	}
	assert.Equal(t, verdictInvalidates, got["global/other/nonblocking/malloc"])
	assert.Equal(t, verdictOK, got["global/other_relaxed/nonblocking/malloc"])
	assert.Equal(t, verdictInvalidates, got["global/same/nonblocking/graph_launch_capturing"])
	assert.Equal(t, verdictOK, got["global/same/nonblocking/copy_pinned_capturing"])
	assert.Equal(t, verdictSkipped, got["global/same/nonblocking/device_sync"], "the fake has no cudaDeviceSynchronize")
}

// TestBudgetLeavesCasesNotRun: a spent -budget starts no more children
// but still writes the whole table, the cases left "not run" (and not
// compared), so a GPU run short of time reports what it measured.
func TestBudgetLeavesCasesNotRun(t *testing.T) {
	fakes.CUDA.Lib(t) // skips without gcc and g++
	var stdout, stderr bytes.Buffer
	rc := run([]string{"-json", "-compare", "-streams=nonblocking", "-only=global/", "-parallel=1", "-budget=1ns"}, &stdout, &stderr)
	require.Equal(t, 0, rc, "stderr: %s", stderr.String())
	var rows []Row
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rows))
	require.Len(t, rows, len(truthCallers)*len(truthOps))
	for _, r := range rows {
		assert.Equal(t, verdictNotRun, r.CUDA, r.Case)
	}
	assert.Contains(t, stderr.String(), fmt.Sprintf("%d of %d case(s) not run", len(rows), len(rows)))
}

// TestLiveRuntime compares the runtime on this machine with the cpu
// backend, when a CUDA device opens (a GPU session); elsewhere it says why
// it did not run.
func TestLiveRuntime(t *testing.T) {
	if os.Getenv(cuda.LibEnv) != "" {
		t.Skipf("%s is set: not the machine's own runtime", cuda.LibEnv)
	}
	d, err := cuda.New(cuda.Options{})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	d.Close()
	var stdout, stderr bytes.Buffer
	rc := run([]string{"-compare", "-timeout=20s"}, &stdout, &stderr)
	t.Log("\n" + stdout.String())
	require.Equal(t, 0, rc, "the cpu backend differs from this runtime:\n%s", strings.TrimSpace(stderr.String()))
}
