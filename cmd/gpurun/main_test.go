package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var stepNames = []string{"device", "conformance", "capprobe", "collectives_bench", "decodeloop",
	"tpdecode", "gpu_tests", "plugin", "stress", "truth", "pressure", "host_memory"}

// The twelve steps, in priority order, fit one device call: their
// timeouts sum to at most 480 s on cuda (a 600 s command with the
// machine's start and the transfers around it).
func TestTimeoutsFitTheDeviceCall(t *testing.T) {
	for _, be := range []string{"cuda", "hip"} {
		for _, fake := range []bool{false, true} {
			defs := steps(config{Backend: be, Fake: fake})
			var names []string
			var sum time.Duration
			for _, d := range defs {
				names = append(names, d.Name)
				sum += d.Timeout
				assert.True(t, d.Skip != "" || d.Command != "", d.Name)
			}
			assert.Equal(t, stepNames, names, be)
			assert.LessOrEqual(t, sum, 480*time.Second, be)
		}
	}
}

// A step past its timeout is killed with everything it started: a
// background child of the step's shell is gone too.
func TestExecStepKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	o := execStep(`sleep 300 & echo $! >`+pidFile+`; echo started; sleep 300`, t.TempDir(), nil, time.Second)
	assert.True(t, o.TimedOut)
	assert.Equal(t, 124, o.RC)
	assert.Contains(t, string(o.Output), "started")
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	gone := false
	for range 100 { // the kill is sent; the kernel reaps it shortly (as init's child)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			gone = true
			break
		}
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(stat), ") Z ") {
			gone = true // killed, waiting for its reaper
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.True(t, gone, "the step's background child %d outlived the step", pid)

	o = execStep(`echo out; echo err >&2; exit 3`, t.TempDir(), nil, 10*time.Second)
	assert.False(t, o.TimedOut)
	assert.Equal(t, 3, o.RC)
	assert.Contains(t, string(o.Output), "out")
	assert.Contains(t, string(o.Output), "err")
}

// run writes a complete results.json (all twelve steps, the schema's keys)
// and results.md, and says which steps did not pass; here with the device
// step alone over a stand-in collbench.
func TestRunWritesCompleteResults(t *testing.T) {
	root, bin, out := t.TempDir(), t.TempDir(), t.TempDir()
	stub := "#!/bin/sh\necho '{\"device\": \"cuda:0 Stand-in GPU (runtime 13.0, driver 13.0)\", \"memory_bytes\": 1024}'\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "collbench"), []byte(stub), 0o755))
	var progress strings.Builder
	rc := cli([]string{"run", "-bin", bin, "-root", root, "-out", out, "-only", "device"}, &progress, &progress)
	assert.Equal(t, 0, rc, progress.String())
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var raw []map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	require.Len(t, raw, len(stepNames))
	for i, s := range raw {
		assert.Equal(t, stepNames[i], s["step"])
		for _, k := range []string{"step", "command", "rc", "seconds", "timeout_s", "figures", "log_tail"} {
			assert.Contains(t, s, k, stepNames[i])
		}
		assert.NotContains(t, s, "fake", "not a fake run")
	}
	assert.Equal(t, "passed", raw[0]["status"])
	assert.Equal(t, "cuda:0 Stand-in GPU (runtime 13.0, driver 13.0)", raw[0]["figures"].(map[string]any)["device"])
	assert.Equal(t, "skipped", raw[1]["status"])
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "| device | passed | 0 |")

	// A failing step fails the run, and the steps after it still run.
	require.NoError(t, os.WriteFile(filepath.Join(bin, "collbench"), []byte("#!/bin/sh\nexit 7\n"), 0o755))
	rc = cli([]string{"run", "-bin", bin, "-root", root, "-out", out, "-only", "device", "-fake"}, &progress, &progress)
	assert.Equal(t, 1, rc)
	steps, err := readResults(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	require.Len(t, steps, len(stepNames))
	assert.Equal(t, statusFailed, steps[0].Status)
	assert.Equal(t, 7, steps[0].RC)
	assert.True(t, steps[0].Fake)
}

func writeSteps(t *testing.T, dir string, steps []Step) {
	t.Helper()
	b, err := json.Marshal(steps)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644))
}

// gpuRun is a run as a GPU would give it: the figures the tables read.
func gpuRun() []Step {
	rep := collReport{Device: "cuda:0 NVIDIA H100 80GB HBM3", CopyBytes: 256 << 20, CopyGBps: 3000, EmptyNs: map[int]float64{4: 2000},
		Rows: []collRow{
			{Ranks: 4, Case: "allreduce/oneshot/1KiB", Op: "allreduce", Alg: "oneshot", Bytes: 1 << 10, CapturedNs: 3000, EagerNs: 15000, OverEmpty: 1.5, CapturedOverEag: 5},
			{Ranks: 4, Case: "allreduce/twoshot/64MiB", Op: "allreduce", Alg: "twoshot", Bytes: 64 << 20, CapturedNs: 1e6, EagerNs: 1e6, BWOverCopy: 0.5, BusBWGBps: 100, CapturedOverEag: 1},
		}}
	return []Step{
		{Step: "device", Backend: "cuda", Status: statusPassed, Figures: map[string]any{"device": "cuda:0 NVIDIA H100 80GB HBM3 (runtime 13.0, driver 13.0)", "date": "2026-11-27"}},
		{Step: "capprobe", Backend: "cuda", Status: statusPassed, Figures: map[string]any{"order": []string{"all_gather"},
			"verdicts": map[string]map[string]string{"all_gather": {"global": "CAPTURABLE", "threadlocal": "CAPTURABLE", "relaxed": "CAPTURABLE"}}}},
		{Step: "collectives_bench", Backend: "cuda", Status: statusPassed, Figures: map[string]any{"report": rep}},
		{Step: "decodeloop", Backend: "cuda", Status: statusPassed, Figures: map[string]any{"replay_over_eager": 9.0, "torch_graph_over_eager": 6.0}},
		{Step: "gpu_tests", Backend: "cuda", Status: statusPassed, Figures: map[string]any{"bench_metrics": map[string]map[string]float64{
			"BenchmarkGraphPoolDecode/capture=pool-16":   {"pool/largest": 1.0, "sum/largest": 32.5},
			"BenchmarkGraphPoolDecode/replay=no_pool-16": {"ns/replay": 10000},
			"BenchmarkGraphPoolDecode/replay=pool-16":    {"ns/replay": 12000},
		}}},
		{Step: "truth", Backend: "cuda", Status: statusFailed, RC: 1, Figures: map[string]any{"changed": []string{"global/same/nonblocking/malloc: recorded refused+invalidated (H100), now ok"}, "compared": 400}},
	}
}

// The targets are read off the figures, met or short.
func TestTargets(t *testing.T) {
	got := map[string]string{}
	for _, tg := range targets(gpuRun()) {
		got[tg.What] = tg.Verdict + " " + tg.Figure
	}
	assert.Equal(t, "met 1.50×", got["1 KiB all-reduce ≤ 2× an empty kernel's graph replay (4 ranks)"])
	assert.Contains(t, got["64 MiB all-reduce (two-shot) traffic ≥ 0.8 of a device copy's (4 ranks)"], "short 0.5")
	assert.Equal(t, "met min 5.00×, median 5.00× over 1 rows", got["captured ≥ 4× eager at ≤ 64 KiB (every such row)"])
	assert.Equal(t, "met 9.00× vs 6.00×", got["decodeloop -kernels=1000 replay/eager ≥ PyTorch's"])
	assert.Equal(t, "met 1.000× (no pool: 32.5×)", got["64 graphs in one pool ≤ 1.1× the largest graph's memory (issue 30)"])
	assert.Equal(t, "short 12000 ns vs 10000 ns (1.20×)", got["graph-pool replay ≤ 1.1× the replay without a pool (issue 30)"])
	for _, tg := range targets(nil) {
		if strings.Contains(tg.What, "issue 30") {
			assert.Equal(t, "n/a not measured in this run", tg.Verdict+" "+tg.Figure, "a run without the benchmark")
		}
	}
}

// The collectives' targets at every rank count come from the heap's own
// dispatch or the copy engines, whichever moved more (the general
// kernels' rows are figures, not targets), at the
// largest size up to 64 MiB, and a collective the run did not measure is
// "not measured" (the recorded runs before these rows).
func TestCollectiveTargets(t *testing.T) {
	rep := collReport{CopyGBps: 3000, Rows: []collRow{
		{Ranks: 2, Case: "allreduce/oneshot/1KiB", Op: "allreduce", Alg: "oneshot", Bytes: 1 << 10, OverEmpty: 1.2},
		{Ranks: 2, Case: "allreduce/oneshot/1MiB", Op: "allreduce", Alg: "oneshot", Bytes: 1 << 20, OverEmpty: 1.9},
		{Ranks: 2, Case: "allreduce/twoshot/1MiB/general", Op: "allreduce", Alg: "twoshot", Variant: "general", Bytes: 1 << 20, OverEmpty: 5},
		{Ranks: 2, Case: "allreduce/oneshot/64MiB", Op: "allreduce", Alg: "oneshot", Bytes: 64 << 20, OverEmpty: 90},
		{Ranks: 2, Case: "reducescatter/1MiB", Op: "reducescatter", Bytes: 1 << 20, BWOverCopy: 0.9},
		{Ranks: 2, Case: "reducescatter/64MiB", Op: "reducescatter", Bytes: 64 << 20, BWOverCopy: 0.79},
		{Ranks: 2, Case: "reducescatter/256MiB", Op: "reducescatter", Bytes: 256 << 20, BWOverCopy: 0.95},
		{Ranks: 2, Case: "allgather/64MiB", Op: "allgather", Bytes: 64 << 20, BWOverCopy: 0.91},
		{Ranks: 2, Case: "allgather/64MiB/general", Op: "allgather", Variant: "general", Bytes: 64 << 20, BWOverCopy: 0.2},
		{Ranks: 4, Case: "reducescatter/64MiB", Op: "reducescatter", Bytes: 64 << 20, Err: "symheap: timeout"},
		{Ranks: 4, Case: "alltoall/64MiB", Op: "alltoall", Bytes: 64 << 20, BWOverCopy: 0.7},
		{Ranks: 4, Case: "alltoall/64MiB/copy", Op: "alltoall", Variant: "copy", Bytes: 64 << 20, BWOverCopy: 0.93},
		{Ranks: 4, Case: "allgather/64MiB/copy", Op: "allgather", Variant: "copy", Bytes: 64 << 20, BWOverCopy: 0.5},
		{Ranks: 4, Case: "allgather/64MiB", Op: "allgather", Bytes: 64 << 20, BWOverCopy: 0.6},
	}}
	got := map[string]string{}
	for _, n := range []int{2, 4} {
		for _, tg := range collectiveTargets(rep, n) {
			got[tg.What] = tg.Verdict + " " + tg.Figure
		}
	}
	assert.Equal(t, "met max 1.90× (allreduce/oneshot/1MiB)", got["every all-reduce up to 1 MiB ≤ 2× an empty kernel's graph replay (2 ranks; issue 45)"])
	assert.Contains(t, got["64 MiB reduce-scatter traffic ≥ 0.8 of a device copy's (2 ranks; issue 45)"], "short 0.79 ")
	assert.Contains(t, got["64 MiB all-gather traffic ≥ 0.9 of a device copy's (2 ranks; issue 45)"], "met 0.91 ")
	assert.Equal(t, "n/a not measured in this run", got["64 MiB all-to-all traffic ≥ 0.9 of a device copy's (2 ranks; issue 45)"])
	assert.Equal(t, "n/a not measured in this run", got["every all-reduce up to 1 MiB ≤ 2× an empty kernel's graph replay (4 ranks; issue 45)"])
	assert.Equal(t, "n/a not measured in this run", got["64 MiB reduce-scatter traffic ≥ 0.8 of a device copy's (4 ranks; issue 45)"], "a failed row measures nothing")
	// The better of the kernels and the copy engines counts: Auto runs it once the run is recorded.
	assert.Contains(t, got["64 MiB all-to-all traffic ≥ 0.9 of a device copy's (4 ranks; issue 45)"], "met 0.93 with the copy engines")
	assert.Contains(t, got["64 MiB all-gather traffic ≥ 0.9 of a device copy's (4 ranks; issue 45)"], "short 0.6 with the kernels")
	assert.Len(t, got, 8)

	// Over the fakes (no 64 MiB rows) the largest size measured stands in.
	small := collReport{Rows: []collRow{{Ranks: 2, Case: "alltoall/1KiB", Op: "alltoall", Bytes: 1 << 10, BWOverCopy: 0.01}}}
	var whats []string
	for _, tg := range collectiveTargets(small, 2) {
		whats = append(whats, tg.Verdict+" "+tg.What)
	}
	assert.Contains(t, whats, "short 1 KiB all-to-all traffic ≥ 0.9 of a device copy's (2 ranks; issue 45)")
}

func docsRoot(t *testing.T) string {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "symheap"), 0o755))
	for _, f := range []struct{ path, section string }{{benchmarksDoc, tablesSection}, {collectivesDoc, probeSection}} {
		begin, end := markers(f.section)
		doc := "# Doc\n\nkept above\n\n" + begin + "\nold\n" + end + "\n\nkept below\n"
		require.NoError(t, os.WriteFile(filepath.Join(root, f.path), []byte(doc), 0o644))
	}
	return root
}

// record files a GPU run under testdata/gpu/<device>-<date>/ and the
// docs' generated sections then come from it; the rest of each doc stays.
func TestRecordFilesARunAndRegenerates(t *testing.T) {
	root, res := docsRoot(t), t.TempDir()
	writeSteps(t, res, gpuRun())
	require.NoError(t, os.WriteFile(filepath.Join(res, "logs.txt"), []byte("log"), 0o644))
	var out strings.Builder
	require.Equal(t, 0, cli([]string{"record", "-root", root, res}, &out, &out), out.String())
	run := filepath.Join(root, recordDir, "nvidia-h100-80gb-hbm3-2026-11-27")
	for _, f := range []string{"results.json", "logs.txt"} {
		assert.FileExists(t, filepath.Join(run, f))
	}
	bench, err := os.ReadFile(filepath.Join(root, benchmarksDoc))
	require.NoError(t, err)
	s := string(bench)
	assert.NotContains(t, s, "\nold\n")
	assert.Contains(t, s, "kept above")
	assert.Contains(t, s, "kept below")
	assert.Contains(t, s, "### nvidia-h100-80gb-hbm3-2026-11-27")
	assert.Contains(t, s, "| 1 KiB all-reduce ≤ 2× an empty kernel's graph replay (4 ranks) | 1.50× | met |")
	assert.Contains(t, s, "| 4 | allreduce/oneshot/1KiB | 3.0 µs | 15.0 µs |")
	assert.Contains(t, s, "- global/same/nonblocking/malloc: recorded refused+invalidated (H100), now ok")
	probe, err := os.ReadFile(filepath.Join(root, collectivesDoc))
	require.NoError(t, err)
	assert.Contains(t, string(probe), "| all_gather | CAPTURABLE | CAPTURABLE | CAPTURABLE | NOT CAPTURABLE |")
	auto, err := os.ReadFile(autoTablePath(root))
	require.NoError(t, err)
	assert.Contains(t, string(auto), "var recordedOneShotMax = []OneShotRow{", "the Auto table is regenerated too")

	// Regenerating again changes nothing.
	require.Equal(t, 0, cli([]string{"regen", "-root", root}, &out, &out), out.String())
	again, err := os.ReadFile(filepath.Join(root, benchmarksDoc))
	require.NoError(t, err)
	assert.Equal(t, s, string(again))
}

// Fake results are never recorded, and never regenerated from.
func TestRecordRefusesFakeResults(t *testing.T) {
	root, res := docsRoot(t), t.TempDir()
	steps := gpuRun()
	steps[3].Fake = true
	writeSteps(t, res, steps)
	_, err := record(root, res)
	require.ErrorIs(t, err, errFake)
	assert.NoDirExists(t, filepath.Join(root, recordDir))
	var out strings.Builder
	assert.Equal(t, 1, cli([]string{"record", "-root", root, res}, &out, &out))
	assert.Contains(t, out.String(), "fake")

	writeSteps(t, filepath.Join(root, recordDir, "smuggled"), steps)
	require.ErrorIs(t, regenerate(root), errFake)
}

// The generated sections need their markers, once each.
func TestReplaceSectionNeedsMarkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	require.NoError(t, os.WriteFile(path, []byte("no markers\n"), 0o644))
	require.Error(t, replaceSection(path, "x", "body"))
	begin, end := markers("x")
	require.NoError(t, os.WriteFile(path, []byte(end+"\n"+begin+"\n"), 0o644))
	require.Error(t, replaceSection(path, "x", "body"), "out of order")
	require.NoError(t, os.WriteFile(path, []byte(begin+"\n"+end+"\n"), 0o644))
	require.NoError(t, replaceSection(path, "x", "body"))
	b, _ := os.ReadFile(path)
	assert.Equal(t, begin+"\nbody\n"+end+"\n", string(b))
}

// The figures' parsers read what the tools print.
func TestFigureParsers(t *testing.T) {
	f := testFigures(config{}, "=== RUN   TestA\n--- PASS: TestA (0.1s)\n    --- FAIL: TestB/x (0.0s)\n--- SKIP: TestC (0.0s)\n"+
		"BenchmarkGPUVirtualMemoryMapUnmap-16   \t 200\t  41000 ns/op\nBenchmarkGPUVirtualMemoryMapUnmap-16 \t 200\t 39000 ns/op\n")
	assert.Equal(t, 1, f["pass"])
	assert.Equal(t, 1, f["fail"])
	assert.Equal(t, []string{"TestB/x"}, f["failed"])
	assert.Equal(t, []string{"TestC"}, f["skipped_tests"])
	assert.Equal(t, map[string]float64{"BenchmarkGPUVirtualMemoryMapUnmap-16": 39000}, f["bench_ns_op"])
	assert.Nil(t, f["bench_metrics"], "ns/op alone is no metric")
	bm := testFigures(config{}, "BenchmarkGraphPoolDecode/capture=pool-2 \t 20\t 4358878 ns/op\t 1835008 largest-graph-B\t 1.000 pool/largest\n"+
		"BenchmarkGraphPoolDecode/replay=pool-2 \t 20\t 1537322 ns/op\t 24021 ns/replay\nPASS\n")["bench_metrics"]
	assert.Equal(t, map[string]map[string]float64{
		"BenchmarkGraphPoolDecode/capture=pool-2": {"largest-graph-B": 1835008, "pool/largest": 1},
		"BenchmarkGraphPoolDecode/replay=pool-2":  {"ns/replay": 24021},
	}, bm)

	tp := tpdecodeFigures(config{Backend: "cuda"}, "multi_gpu: ran on 2 devices\n"+
		`{"backend":"cuda","can_access_peer":[[true,false],[false,true]],"devices":2}`+"\n")
	assert.Equal(t, "ran on 2 devices", tp["multi_gpu"])
	assert.Equal(t, [][]bool{{true, false}, {false, true}}, tp["p2p_matrix"])
	assert.Equal(t, "skipped: one GPU", tpdecodeFigures(config{}, "multi_gpu: skipped: one GPU\n")["multi_gpu"])
	assert.Equal(t, false, tp["pipeline_checked"])
	assert.Equal(t, true, tpdecodeFigures(config{Backend: "hip"}, "2 stages as goroutines on hip (device heap), 5 steps replayed, every output checked\n")["pipeline_checked"])
	assert.Equal(t, false, tpdecodeFigures(config{Backend: "cuda"}, "2 stages as goroutines on cuda (host heap), 5 steps replayed, every output checked\n")["pipeline_checked"],
		"the put/signal step is the device heap's")
	moe := "4 experts as goroutines on hip (device heap): dispatch, expert and combine captured once, 5 steps replayed with new routing, every token checked\n"
	assert.Equal(t, true, tpdecodeFigures(config{Backend: "hip"}, moe)["moe_checked"])
	assert.Equal(t, false, tpdecodeFigures(config{Backend: "cuda"}, moe)["moe_checked"], "another backend's line")
	assert.Equal(t, false, tp["moe_checked"])

	d := decodeloopFigures(config{}, "200 steps of 1000 axpy kernels on cuda: eager 5ms/step, graph replay 1ms/step (5.00x)\n"+
		"BenchmarkTorchReplayAxpy/kernels=1000/impl=eager\t20\t6000000.0 ns/op\nBenchmarkTorchReplayAxpy/kernels=1000/impl=graph\t200\t1500000.0 ns/op\n")
	assert.Equal(t, 5.0, d["replay_over_eager"])
	assert.Equal(t, 4.0, d["torch_graph_over_eager"])

	tr := truthFigures(config{}, "changed: b/x: recorded ok (H100), now refused\nchanged: a/y: recorded ok (H100), now HANG\nagainst f (H100, driver 1): 12 case(s) compared, 2 verdict(s) changed\n")
	assert.Equal(t, []string{"a/y: recorded ok (H100), now HANG", "b/x: recorded ok (H100), now refused"}, tr["changed"])
	assert.Equal(t, 12, tr["compared"])
}

// check passes a complete run whose every step passed, or was skipped for
// want of a tool on the backend, and nothing else.
func TestCheck(t *testing.T) {
	complete := func() []Step {
		var run []Step
		for _, n := range stepNames {
			run = append(run, Step{Step: n, Status: statusPassed, Fake: true, Figures: map[string]any{}})
		}
		return run
	}
	require.NoError(t, check(complete(), true))
	run := complete()
	run[9].Status, run[9].Figures["skipped"] = statusSkipped, "cudatruth probes the CUDA runtime only"
	require.NoError(t, check(run, true))
	run[9].Figures["skipped"] = skippedOnly
	require.ErrorContains(t, check(run, true), "truth: skipped")
	run = complete()
	run[4].Status, run[4].RC = statusTimeout, 124
	require.ErrorContains(t, check(run, true), "decodeloop: timeout (rc 124)")
	require.ErrorContains(t, check(complete()[:9], true), "9 steps, want 12")
	run = complete()
	run[2], run[3] = run[3], run[2]
	require.ErrorContains(t, check(run, true), "want \"capprobe\"")
	run = complete()
	run[0].Fake = false
	require.ErrorContains(t, check(run, true), "device: not a fake run")
}

// The host_memory step's figures: mmapweights' check and mapping, the
// group's results, and the cache's speedup from the best of each case.
func TestHostMemoryFigures(t *testing.T) {
	out := "--- PASS: TestConformance/cuda/HostMemory/map_host_zero_copy_or_registers (0.00s)\n" +
		"16777216 B of weights mapped on cuda: registered (no pageable memory access), copied by a captured UploadHost; 11 replays of one captured step, outputs checked against the file\n" +
		"BenchmarkHostAlloc4MiB/cached-16   \t     200\t      2000 ns/op\n" +
		"BenchmarkHostAlloc4MiB/pin-16      \t     200\t    900000 ns/op\n" +
		"BenchmarkHostAlloc4MiB/cached-16   \t     200\t      1000 ns/op\n" +
		"BenchmarkHostAlloc4MiB/pin-16      \t     200\t    800000 ns/op\n"
	f := hostMemoryFigures(config{Backend: "cuda"}, out)
	assert.Equal(t, true, f["mmapweights_checked"])
	assert.Equal(t, "registered", f["mmapweights_mapping"])
	assert.Equal(t, 1, f["pass"])
	assert.Equal(t, 800.0, f["host_cache_speedup"])
	f = hostMemoryFigures(config{Backend: "cuda"}, "mmapweights: MapHost: refused\n")
	assert.Equal(t, false, f["mmapweights_checked"])
	assert.NotContains(t, f, "host_cache_speedup")
}
