package main

import (
	"encoding/json"
	"fmt"
	"github.com/capalloc/capalloc/internal/collreport"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// config is one run's settings.
type config struct {
	Root     string // the repository's root (the steps' working tree)
	Bin      string // the prebuilt binaries
	Out      string // results
	FakeLibs string // the fake runtimes' libraries (-fake)
	Backend  string // cuda or hip
	Fake     bool
	Only     string
}

// Step is one entry of results.json.
type Step struct {
	Step     string         `json:"step"`
	Command  string         `json:"command"`
	RC       int            `json:"rc"`
	Seconds  float64        `json:"seconds"`
	Timeout  float64        `json:"timeout_s"`
	Status   string         `json:"status"` // passed, failed, timeout, skipped
	Figures  map[string]any `json:"figures"`
	LogTail  string         `json:"log_tail"`
	Fake     bool           `json:"fake,omitempty"`
	Started  string         `json:"started"` // UTC, RFC 3339
	Backend  string         `json:"backend"`
	Platform string         `json:"platform,omitempty"` // the runner's GOOS/GOARCH
}

const (
	statusPassed  = "passed"
	statusFailed  = "failed"
	statusTimeout = "timeout"
	statusSkipped = "skipped"
)

// skippedOnly is the reason of a step -only left out.
const skippedOnly = "not in -only"

// logTailBytes is how much of a step's output results.json keeps; the
// whole of it is in logs.txt.
const logTailBytes = 3000

// stepDef is one step: its command (bash, run from the repository root
// unless Dir says a folder under it), its timeout, and what to read off
// its output.
type stepDef struct {
	Name    string
	Timeout time.Duration
	Dir     string
	Command string
	Skip    string // not run, and why (a step this backend has no tool for)
	Figures func(c config, out string) map[string]any
}

// pluginGPU is the plugin step on a GPU. There every driver the suite
// opens is a backend process that initializes the runtime: about 0.35 s
// each on an H200, one at a time, and the whole suite opens 482, which
// ran past 70 s (testdata/gpu/nvidia-h200-2026-11-27). So it leaves out
// the truth table's threadlocal and relaxed modes (116 opens; the
// in-process conformance step runs all three on the GPU, global runs
// here), bad input (55; the plugin's validation is the same code over any
// runtime, run over the fakes in every CI run) and collectives (66; plugin
// mode refuses the symmetric heap, so they would prove the cpu heap
// again). Two runs, since one -test.skip pattern cannot name subtests at
// two depths.
func pluginGPU(be string) string {
	run := `"$B/conformance.test" -backend=plugin:` + be + ` -test.count=1 -test.v`
	return `rc=0
` + run + ` -test.timeout=40s -test.run 'TestConformance/plugin:` + be + `/TruthTable/global$' || rc=1
` + run + ` -test.timeout=80s -test.skip 'TestConformance/plugin:` + be + `/(TruthTable|BadInput|Collectives)$' || rc=1
exit $rc`
}

// steps are the kit's steps (docs/gpu-kit.md), in priority order, but for the pressure
// and host_memory steps, last so that the truth step's index stays. Their timeouts sum
// to 480 s (TestTimeoutsFitTheDeviceCall). $B is the binaries'
// folder, $R the results folder, $SMALL 1 over the fakes. Over the fakes
// (every CI run) the sizes are small and the conformance runs leave out
// their slowest groups, which go test ./... runs over the same fakes: the
// fake run proves the kit, the GPU run the claims.
func steps(c config) []stepDef {
	be := c.Backend
	small := c.Fake
	pick := func(full, fake string) string {
		if small {
			return fake
		}
		return full
	}
	device := `"$B/collbench" -backend=` + be + ` -info; rc=$?
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv; nvidia-smi -L; fi
if command -v rocminfo >/dev/null; then rocminfo | grep -m4 -E 'Marketing Name|gfx'; fi
exit $rc`
	// The graph pools on the device: 64 decode-step graphs in one
	// pool against the largest graph alone and the sum without a pool, and
	// replay time with and without the pool (figures bench_metrics).
	graphPoolBench := `(cd conformance && "$B/conformance.test" -backend=` + be + ` -test.run '^$' -test.bench 'GraphPoolDecode' -test.benchtime ` +
		pick("50x", "3x") + `) || rc=1`
	gpuTests := `rc=0
(cd cuda && "$B/cuda.test" -test.run '^TestGPU' -test.v -test.count=1) || rc=1
(cd nccl && "$B/nccl.test" -test.run '^TestGPU' -test.v -test.count=1) || rc=1
(cd cuda && "$B/cuda.test" -test.run '^$' -test.bench 'GPUVirtualMemoryMapUnmap' -test.benchtime ` + pick("200x", "5x") + ` -test.count 3) || rc=1
` + graphPoolBench + `
exit $rc`
	if be == "hip" { // the TestGPU* tests and the map benchmark are CUDA's; hip's own over the device heap run in conformance
		gpuTests = `rc=0
(cd hip && "$B/hip.test" -test.run '^TestGPU' -test.v -test.count=1) || rc=1
` + graphPoolBench + `
exit $rc`
	}
	stressRun := "TestConformance/" + be + "/Collectives/device_heap/stress_replays"
	defs := []stepDef{
		{Name: "device", Timeout: 10 * time.Second, Command: device, Figures: deviceFigures},
		{Name: "conformance", Timeout: 60 * time.Second, Dir: "conformance",
			Command: `"$B/conformance.test" -backend=` + be + ` -test.count=1 -test.v -test.timeout=55s` +
				pick("", ` -test.skip 'TestConformance/`+be+`/(Collectives|Probe|Watchdog)$'`), Figures: testFigures},
		{Name: "capprobe", Timeout: 10 * time.Second, // 0.7 s on an H200
			Command: `"$B/capprobe" -backend=` + be + ` -mode=all -check -json >"$R/capprobe.json"`, Figures: capprobeFigures},
		{Name: "collectives_bench", Timeout: 25 * time.Second, // 2.3 s on an H200 with 18 cases; 51 now (the copy-engine and alltoallv rows), about 8 s estimated
			Command: `"$B/collbench" -backend=` + be + pick("", " -small") + ` -json "$R/collbench.json"`, Figures: collbenchFigures},
		{Name: "decodeloop", Timeout: 35 * time.Second, Command: `rc=0
"$B/decodeloop" -backend=` + be + pick(" -kernels=1000 -steps 200", " -kernels=10 -steps 5") + ` || rc=1
if [ "$SMALL" != 1 ] && python3 -c 'import torch' 2>/dev/null; then python3 cuda/testdata/baseline.py --only replay_axpy --rounds 5 || rc=1; else echo "torch: not importable here"; fi
exit $rc`, Figures: decodeloopFigures},
		{Name: "tpdecode", Timeout: 30 * time.Second, Command: `rc=0
"$B/tpdecode" -backend=` + be + pick("", " -steps 5") + ` || rc=1
"$B/tpdecode" -backend=` + be + ` -procs -ranks 2` + pick("", " -steps 5") + ` || rc=1
"$B/pipeline" -backend=` + be + pick(" -steps 200", " -steps 5") + ` || rc=1
"$B/moe" -backend=` + be + pick(" -steps 200", " -steps 5") + ` || rc=1
` + multiGPU(be, pick) + `
exit $rc`, Figures: tpdecodeFigures},
		{Name: "gpu_tests", Timeout: 45 * time.Second, Command: gpuTests, Figures: testFigures},
		{Name: "plugin", Timeout: 125 * time.Second, Dir: "conformance",
			Command: pick(pluginGPU(be), `"$B/conformance.test" -backend=plugin:`+be+` -test.count=1 -test.v -test.timeout=120s`+
				` -test.skip 'TestConformance/plugin:`+be+`/(TruthTable|Watchdog|Concurrency)$'`), Figures: testFigures},
		{Name: "stress", Timeout: 45 * time.Second, Dir: "conformance",
			Command: `CAPALLOC_STRESS_REPLAYS=` + pick("10000", "20") + ` "$B/conformance.test" -backend=` + be +
				` -test.run '` + stressRun + `' -test.v -test.count=1 -test.timeout=40s`, Figures: testFigures},
		{Name: "truth", Timeout: 60 * time.Second,
			Command: `"$B/cudatruth" -json -parallel 16 -timeout 10s -budget 40s` + pick(" -only=global/", " -streams=nonblocking -only=global/") +
				` -against cmd/cudatruth/testdata/h100-driver580-cuda13.0.json >"$R/truth.json"`, Figures: truthFigures},
		// The allocator under pressure on the device: memory_fraction=0.05
		// filled, refused with the limit in the message, a callback that
		// frees and a retry served (conformance's Pressure group, whose
		// FillToTheFraction rule is this step's claim).
		{Name: "pressure", Timeout: 15 * time.Second, Dir: "conformance",
			Command: `"$B/conformance.test" -backend=` + be + ` -test.run 'TestConformance/` + be + `/Pressure' -test.v -test.count=1 -test.timeout=12s`,
			Figures: testFigures},
		// Host memory on the device (docs/host-memory.md): conformance's
		// HostMemory group (the pinned cache in captures, registration,
		// managed memory and its prefetch, MapHost), weights from an
		// mmap'ed file through MapHost in a captured step, and the pinned
		// cache's hit against a fresh pin. Its 20 s came from capprobe
		// (25 s to 10 s; 0.7 s on an H200) and collectives_bench (30 s to
		// 25 s; 2.3 s on an H200).
		{Name: "host_memory", Timeout: 20 * time.Second, Command: `rc=0
(cd conformance && "$B/conformance.test" -backend=` + be + ` -test.run 'TestConformance/` + be + `/HostMemory' -test.v -test.count=1 -test.timeout=8s) || rc=1
"$B/mmapweights" -backend=` + be + pick(" -floats 4194304 -replays 10", " -floats 4096 -replays 3") + ` || rc=1
(cd conformance && "$B/conformance.test" -backend=` + be + ` -test.run '^$' -test.bench 'HostAlloc4MiB' -test.benchtime ` + pick("200x", "5x") + ` -test.count 3) || rc=1
exit $rc`, Figures: hostMemoryFigures},
	}
	if be == "hip" {
		defs[9].Command, defs[9].Skip = "", "cudatruth probes the CUDA runtime only: no HIP table yet"
	}
	return defs
}

// runAll runs every step in order, writing results.json, results.md and
// logs.txt after each, so a run cut short still leaves what it did.
func runAll(c config, progress io.Writer) ([]Step, error) {
	env := []string{"B=" + c.Bin, "R=" + c.Out, "SMALL=0"}
	if c.Fake {
		env = append(env, "SMALL=1", "CAPALLOC_GPU_SMALL=1",
			"CAPALLOC_CUDA_LIB="+filepath.Join(c.FakeLibs, "libcudart.so"),
			"CAPALLOC_HIP_LIB="+filepath.Join(c.FakeLibs, "libamdhip64.so.6"))
	}
	logs, err := os.Create(filepath.Join(c.Out, "logs.txt"))
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	var done []Step
	only := map[string]bool{}
	for _, n := range strings.Split(c.Only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	for _, d := range steps(c) {
		s := Step{Step: d.Name, Command: d.Command, Timeout: d.Timeout.Seconds(), Figures: map[string]any{},
			Fake: c.Fake, Started: time.Now().UTC().Format(time.RFC3339), Backend: c.Backend, Platform: platform()}
		switch {
		case d.Skip != "":
			s.Status, s.Figures["skipped"] = statusSkipped, d.Skip
		case len(only) > 0 && !only[d.Name]:
			s.Status, s.Figures["skipped"] = statusSkipped, skippedOnly
		default:
			fmt.Fprintf(progress, "== %s (timeout %v)\n", d.Name, d.Timeout)
			o := execStep(d.Command, filepath.Join(c.Root, d.Dir), env, d.Timeout)
			s.RC, s.Seconds = o.RC, round(o.Elapsed.Seconds(), 2)
			s.Status = statusPassed
			if o.TimedOut {
				s.Status = statusTimeout
			} else if o.RC != 0 {
				s.Status = statusFailed
			}
			out := string(o.Output)
			if d.Figures != nil {
				s.Figures = safeFigures(d.Figures, c, out)
			}
			s.LogTail = tail(out, logTailBytes)
			fmt.Fprintf(logs, "===== %s: %s (rc %d, %.1f s)\n$ %s\n%s\n", d.Name, s.Status, s.RC, s.Seconds, d.Command, out)
			fmt.Fprintf(progress, "   %s: rc %d in %.1f s\n", s.Status, s.RC, s.Seconds)
		}
		done = append(done, s)
		if err := writeResults(c.Out, done); err != nil {
			return done, err
		}
	}
	return done, nil
}

// safeFigures reads the figures, recording a parser's panic as a figure
// rather than losing the run.
func safeFigures(f func(config, string) map[string]any, c config, out string) (m map[string]any) {
	defer func() {
		if r := recover(); r != nil {
			m = map[string]any{"figures_error": fmt.Sprint(r)}
		}
	}()
	m = f(c, out)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

func writeResults(dir string, done []Step) error {
	b, err := json.MarshalIndent(done, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(resultsMarkdown(done)), 0o644)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < 200 {
		s = s[i+1:]
	}
	return "…" + s
}

func round(x float64, digits int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	return v
}

// --- figures ---

// jsonObject is the first JSON object in out.
func jsonObject(out string) map[string]any {
	i := strings.IndexByte(out, '{')
	if i < 0 {
		return nil
	}
	var m map[string]any
	if err := json.NewDecoder(strings.NewReader(out[i:])).Decode(&m); err != nil {
		return nil
	}
	return m
}

func deviceFigures(c config, out string) map[string]any {
	f := map[string]any{"date": time.Now().UTC().Format("2006-01-02")}
	for k, v := range jsonObject(out) {
		f[k] = v
	}
	gpus := 0
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "GPU ") && strings.Contains(l, "UUID"):
			gpus++
		case strings.Contains(l, ", ") && !strings.HasPrefix(l, "name,") && f["nvidia_smi"] == nil && strings.Count(l, ",") == 3:
			f["nvidia_smi"] = strings.TrimSpace(l) // name, compute_cap, driver_version, memory.total
		case strings.Contains(l, "gfx"):
			f["gfx"] = strings.TrimSpace(l)
		}
	}
	f["gpus_seen"] = max(gpus, 1)
	return f
}

var (
	reTestResult = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	reBench      = regexp.MustCompile(`(?m)^(Benchmark\S+)\s+\d+\s+([0-9.]+) ns/op`)
)

// testFigures counts a test binary's -test.v results and names the
// failures (the first 20) and the skips of top-level tests with why.
func testFigures(c config, out string) map[string]any {
	n := map[string]int{}
	var failed, skipped []string
	for _, m := range reTestResult.FindAllStringSubmatch(out, -1) {
		n[m[1]]++
		switch {
		case m[1] == "FAIL" && len(failed) < 20:
			failed = append(failed, m[2])
		case m[1] == "SKIP" && !strings.Contains(m[2], "/") && len(skipped) < 20:
			skipped = append(skipped, m[2])
		}
	}
	f := map[string]any{"pass": n["PASS"], "fail": n["FAIL"], "skip": n["SKIP"]}
	if len(failed) > 0 {
		f["failed"] = failed
	}
	if len(skipped) > 0 {
		f["skipped_tests"] = skipped
	}
	bench := map[string]float64{}
	for _, m := range reBench.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		if old, ok := bench[m[1]]; !ok || v < old { // the best of -count runs
			bench[m[1]] = v
		}
	}
	if len(bench) > 0 {
		f["bench_ns_op"] = bench
	}
	if m := benchMetrics(out); len(m) > 0 {
		f["bench_metrics"] = m
	}
	return f
}

// benchMetrics reads the metrics a benchmark reports beside ns/op
// (b.ReportMetric: "1.000 pool/largest", "24021 ns/replay"), by benchmark
// name; a name seen twice keeps its last line.
func benchMetrics(out string) map[string]map[string]float64 {
	m := map[string]map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		fs := strings.Fields(line)
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fs[1]); err != nil {
			continue
		}
		for i := 2; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			if err != nil {
				break
			}
			switch fs[i+1] {
			case "ns/op", "B/op", "allocs/op":
				continue
			}
			if m[fs[0]] == nil {
				m[fs[0]] = map[string]float64{}
			}
			m[fs[0]][fs[i+1]] = v
		}
	}
	return m
}

// probeRow is one row of capprobe -json.
type probeRow struct {
	Op, Mode, Verdict, Expected, Error string
}

func capprobeFigures(c config, out string) map[string]any {
	b, err := os.ReadFile(filepath.Join(c.Out, "capprobe.json"))
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	var rows []probeRow
	if err := json.Unmarshal(b, &rows); err != nil {
		return map[string]any{"error": "capprobe.json: " + err.Error()}
	}
	verdicts := map[string]map[string]string{} // op -> mode -> verdict
	unexpected := []string{}
	for _, r := range rows {
		if verdicts[r.Op] == nil {
			verdicts[r.Op] = map[string]string{}
		}
		verdicts[r.Op][r.Mode] = r.Verdict
		if r.Verdict != r.Expected {
			unexpected = append(unexpected, r.Mode+"/"+r.Op+": "+r.Verdict+", CUDA's rules give "+r.Expected)
		}
	}
	var order []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Op] {
			seen[r.Op] = true
			order = append(order, r.Op)
		}
	}
	return map[string]any{"rows": len(rows), "verdicts": verdicts, "order": order, "unexpected": unexpected}
}

// collReport is what collbench -json writes.
type (
	collReport = collreport.Report
	collRow    = collreport.Row
)

func collbenchFigures(c config, out string) map[string]any {
	b, err := os.ReadFile(filepath.Join(c.Out, "collbench.json"))
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	var rep collReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return map[string]any{"error": "collbench.json: " + err.Error()}
	}
	return map[string]any{"report": rep}
}

var (
	reDecodeRatio = regexp.MustCompile(`graph replay \S+/step \(([0-9.]+)x\)`)
	reTorchAxpy   = regexp.MustCompile(`(?m)^BenchmarkTorchReplayAxpy/kernels=1000/impl=(eager|graph)\s+\d+\s+([0-9.]+) ns/op`)
	reTPRatio     = regexp.MustCompile(`replay: \S+ per step \(slowest rank\), ([0-9.]+)x`)
)

func decodeloopFigures(c config, out string) map[string]any {
	f := map[string]any{}
	if m := reDecodeRatio.FindStringSubmatch(out); m != nil {
		f["replay_over_eager"], _ = strconv.ParseFloat(m[1], 64)
	}
	t := map[string]float64{}
	for _, m := range reTorchAxpy.FindAllStringSubmatch(out, -1) {
		t[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	if t["eager"] > 0 && t["graph"] > 0 {
		f["torch_graph_over_eager"] = round(t["eager"]/t["graph"], 2)
	} else {
		f["torch"] = "not measured (torch not importable, or over the fakes)"
	}
	return f
}

// hostMemoryFigures is testFigures plus whether mmapweights checked its
// replays, how it read the mapping, and the pinned cache's speedup: a
// fresh pin's HostAlloc+Close pair over a cached one (the best of the
// -count runs each).
func hostMemoryFigures(c config, out string) map[string]any {
	f := testFigures(c, out)
	f["mmapweights_checked"] = strings.Contains(out, "outputs checked against the file")
	if m := reMapped.FindStringSubmatch(out); m != nil {
		f["mmapweights_mapping"] = m[1]
	}
	var cached, pin float64
	if b, ok := f["bench_ns_op"].(map[string]float64); ok {
		for name, v := range b {
			switch {
			case strings.HasPrefix(name, "BenchmarkHostAlloc4MiB/cached"):
				cached = v
			case strings.HasPrefix(name, "BenchmarkHostAlloc4MiB/pin"):
				pin = v
			}
		}
	}
	if cached > 0 && pin > 0 {
		f["host_cache_speedup"] = round(pin/cached, 2)
	}
	return f
}

// reMapped is how mmapweights read the mapping ("registered (...)" or
// "in place (...)").
var reMapped = regexp.MustCompile(`(?m)B of weights mapped on \S+: (registered|in place)`)

func tpdecodeFigures(c config, out string) map[string]any {
	f := map[string]any{"multi_gpu": "not reported"}
	if m := reMultiGPU.FindStringSubmatch(out); m != nil {
		f["multi_gpu"] = m[1]
	}
	if m := rePeers.FindString(out); m != "" {
		var p struct {
			Matrix [][]bool `json:"can_access_peer"`
		}
		if json.Unmarshal([]byte(m), &p) == nil {
			f["p2p_matrix"] = p.Matrix
		}
	}
	if m := reTPRatio.FindStringSubmatch(out); m != nil {
		f["goroutine_replay_over_eager"], _ = strconv.ParseFloat(m[1], 64)
	}
	f["process_ranks_checked"] = strings.Contains(out, "2 ranks as processes on "+c.Backend+": every result checked")
	// examples/pipeline: two goroutine stages handing activations over by
	// the device heap's put and signals, captured and replayed
	f["pipeline_checked"] = strings.Contains(out, "2 stages as goroutines on "+c.Backend+" (device heap)") &&
		strings.Contains(out, "steps replayed, every output checked")
	// examples/moe: dispatch and combine by AllToAllV, counts read on the
	// device, captured once and replayed with new routing every step
	f["moe_checked"] = strings.Contains(out, "experts as goroutines on "+c.Backend+" (device heap)") &&
		strings.Contains(out, "steps replayed with new routing, every token checked")
	return f
}

// multiGPU is the tpdecode step's part for ranks on several devices of
// one process: with two or more GPUs seen it records their
// peer-access matrix (collbench -peers) and runs tpdecode's goroutine
// ranks spread over them (-devices, peer access enabled by the heap);
// with one it says so. Over the fakes it runs on two fake devices, so the
// path is exercised in every CI run.
func multiGPU(be string, pick func(gpu, fake string) string) string {
	count := `n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')`
	if be == "hip" {
		count = `n=$(rocm-smi --showid 2>/dev/null | grep -oE '^GPU\[[0-9]+\]' | sort -u | wc -l)`
	}
	env := ""
	if pick("", "fake") == "fake" {
		count, env = "n=2", "FAKE_CUDA_DEVICES=2 FAKE_HIP_DEVICES=2 "
	}
	return count + `
if [ "${n:-0}" -ge 2 ]; then
  echo "multi_gpu: ran on $n devices"
  ` + env + `"$B/collbench" -backend=` + be + ` -peers "$n" || rc=1
  ` + env + `"$B/tpdecode" -backend=` + be + ` -devices="$n" -ranks $(( n > 4 ? 8 : 2 * n ))` + pick("", " -steps 5") + ` || rc=1
else
  echo "multi_gpu: skipped: one GPU"
fi`
}

var (
	reMultiGPU = regexp.MustCompile(`(?m)^multi_gpu: (.*)$`)
	rePeers    = regexp.MustCompile(`(?m)^\{"backend".*"can_access_peer".*\}$`)
	reChanged  = regexp.MustCompile(`(?m)^changed: (.*)$`)
	reNotRun   = regexp.MustCompile(`(?m)^cudatruth: -budget .* spent: (\d+) of \d+ case\(s\) not run$`)
	reAgainst  = regexp.MustCompile(`(?m)^against .*: (\d+) case\(s\) compared, (\d+) verdict\(s\) changed$`)
)

func truthFigures(c config, out string) map[string]any {
	f := map[string]any{}
	changed := []string{}
	for _, m := range reChanged.FindAllStringSubmatch(out, -1) {
		changed = append(changed, m[1])
	}
	sort.Strings(changed)
	f["changed"] = changed
	if m := reAgainst.FindStringSubmatch(out); m != nil {
		f["compared"], _ = strconv.Atoi(m[1])
	}
	if m := reNotRun.FindStringSubmatch(out); m != nil {
		f["not_run"], _ = strconv.Atoi(m[1])
	}
	return f
}
