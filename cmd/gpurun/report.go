package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strings"

	"github.com/capalloc/capalloc/internal/collreport"
)

func platform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// figure decodes the figure key of s into v (a figure is a Go value in a
// run, and a JSON one once read back from results.json).
func figure(s *Step, key string, v any) bool {
	if s == nil || s.Figures[key] == nil {
		return false
	}
	b, err := json.Marshal(s.Figures[key])
	return err == nil && json.Unmarshal(b, v) == nil
}

func find(steps []Step, name string) *Step {
	for i := range steps {
		if steps[i].Step == name {
			return &steps[i]
		}
	}
	return nil
}

// target is one of the kit's targets (docs/gpu-kit.md, "Targets"), met
// or short (a miss is a finding).
type target struct {
	What, Figure, Verdict string
}

func verdictOf(ok bool) string {
	if ok {
		return "met"
	}
	return "short"
}

// targets reads the kit's targets off a run's figures.
func targets(steps []Step) []target {
	var ts []target
	var rep collReport
	if figure(find(steps, "collectives_bench"), "report", &rep) && len(rep.Rows) > 0 {
		ranks := map[int]bool{}
		for _, r := range rep.Rows {
			ranks[r.Ranks] = true
		}
		var ns []int
		for n := range ranks {
			ns = append(ns, n)
		}
		sort.Ints(ns)
		largest := int64(0)
		for _, r := range rep.Rows {
			if r.Op == "allreduce" && r.Err == "" {
				largest = max(largest, r.Bytes)
			}
		}
		for _, n := range ns {
			for _, r := range rep.Rows {
				if r.Ranks == n && r.Case == "allreduce/oneshot/1KiB" && r.Err == "" {
					ts = append(ts, target{fmt.Sprintf("1 KiB all-reduce ≤ 2× an empty kernel's graph replay (%d ranks)", n),
						fmt.Sprintf("%.2f×", r.OverEmpty), verdictOf(r.OverEmpty <= 2)})
				}
			}
			for _, r := range rep.Rows {
				if r.Ranks == n && r.Op == "allreduce" && r.Alg == "twoshot" && r.Bytes == min(largest, 64<<20) && r.Err == "" {
					ts = append(ts, target{fmt.Sprintf("%s all-reduce (two-shot) traffic ≥ 0.8 of a device copy's (%d ranks)", sizeLabel(r.Bytes), n),
						fmt.Sprintf("%.3g (busbw %.3g GB/s; copy %.3g GB/s)", r.BWOverCopy, r.BusBWGBps, rep.CopyGBps), verdictOf(r.BWOverCopy >= 0.8)})
				}
			}
			ts = append(ts, collectiveTargets(rep, n)...)
		}
		var small []float64
		for _, r := range rep.Rows {
			if r.Bytes <= 64<<10 && r.Err == "" {
				small = append(small, r.CapturedOverEag)
			}
		}
		if len(small) > 0 {
			sort.Float64s(small)
			ts = append(ts, target{"captured ≥ 4× eager at ≤ 64 KiB (every such row)",
				fmt.Sprintf("min %.2f×, median %.2f× over %d rows", small[0], small[len(small)/2], len(small)), verdictOf(small[0] >= 4)})
		}
	} else {
		ts = append(ts, target{"collectives (1 KiB latency, 64 MiB bandwidth, captured over eager)", "no figures", "short"})
	}
	dl := find(steps, "decodeloop")
	var ours, torch float64
	switch {
	case !figure(dl, "replay_over_eager", &ours):
		ts = append(ts, target{"decodeloop -kernels=1000 replay/eager ≥ PyTorch's", "no figure", "short"})
	case !figure(dl, "torch_graph_over_eager", &torch):
		ts = append(ts, target{"decodeloop -kernels=1000 replay/eager ≥ PyTorch's", fmt.Sprintf("%.2f×; PyTorch not measured", ours), "n/a"})
	default:
		ts = append(ts, target{"decodeloop -kernels=1000 replay/eager ≥ PyTorch's", fmt.Sprintf("%.2f× vs %.2f×", ours, torch), verdictOf(ours >= torch)})
	}
	return append(ts, graphPoolTargets(find(steps, "gpu_tests"))...)
}

// collectiveTargets are the targets of every collective at n ranks, read
// off the rows of the heap's own dispatch (Variant ""; the general
// kernels' rows are figures, not targets): every all-reduce up to 1 MiB
// ≤ 2× an empty kernel's graph, and at 64 MiB (the largest size measured
// up to it, over the fakes) reduce-scatter's traffic ≥ 0.8 of a device
// copy's, all-gather's and all-to-all's ≥ 0.9, from the better of the
// kernels' row and the copy engines' (the one Auto runs once the run is
// recorded). A collective the run did
// not measure is "not measured" (runs recorded before the rows joined
// the kit).
func collectiveTargets(rep collReport, n int) []target {
	var ts []target
	latency := fmt.Sprintf("every all-reduce up to 1 MiB ≤ 2× an empty kernel's graph replay (%d ranks; issue 45)", n)
	var worst *collRow
	for i, r := range rep.Rows {
		if r.Ranks == n && r.Op == "allreduce" && r.Variant == "" && r.Bytes <= 1<<20 && r.Err == "" && (worst == nil || r.OverEmpty > worst.OverEmpty) {
			worst = &rep.Rows[i]
		}
	}
	if worst == nil {
		ts = append(ts, target{latency, "not measured in this run", "n/a"})
	} else {
		ts = append(ts, target{latency, fmt.Sprintf("max %.2f× (%s)", worst.OverEmpty, worst.Case), verdictOf(worst.OverEmpty <= 2)})
	}
	for _, want := range []struct {
		op, name string
		min      float64
	}{{"reducescatter", "reduce-scatter", 0.8}, {"allgather", "all-gather", 0.9}, {"alltoall", "all-to-all", 0.9}} {
		var size int64
		for _, r := range rep.Rows {
			if r.Op == want.op && r.Variant == "" && r.Err == "" && r.Bytes <= 64<<20 {
				size = max(size, r.Bytes)
			}
		}
		if size == 0 {
			size = 64 << 20
		}
		t := target{fmt.Sprintf("%s %s traffic ≥ %.1f of a device copy's (%d ranks; issue 45)", sizeLabel(size), want.name, want.min, n), "not measured in this run", "n/a"}
		var best *collRow
		for i, r := range rep.Rows {
			ownOrCopy := r.Variant == "" || r.Variant == collreport.CopyVariant
			if r.Ranks == n && r.Op == want.op && ownOrCopy && r.Err == "" && r.Bytes == size && (best == nil || r.BWOverCopy > best.BWOverCopy) {
				best = &rep.Rows[i]
			}
		}
		if best != nil {
			how := "kernels"
			if best.Variant == collreport.CopyVariant {
				how = "copy engines"
			}
			t.Figure, t.Verdict = fmt.Sprintf("%.3g with the %s (busbw %.3g GB/s; copy %.3g GB/s)", best.BWOverCopy, how, best.BusBWGBps, rep.CopyGBps), verdictOf(best.BWOverCopy >= want.min)
		}
		ts = append(ts, t)
	}
	return ts
}

// graphPoolTargets are the graph pools' targets: 64 decode-step graphs in one pool hold
// at most 1.1× the largest graph's memory, and replay no slower than
// without a pool (within 10%), read off BenchmarkGraphPoolDecode's
// metrics (n/a in a run that did not measure them: runs before the
// benchmark joined the kit).
func graphPoolTargets(s *Step) []target {
	const bytesWhat = "64 graphs in one pool ≤ 1.1× the largest graph's memory (issue 30)"
	const replayWhat = "graph-pool replay ≤ 1.1× the replay without a pool (issue 30)"
	var bm map[string]map[string]float64
	figure(s, "bench_metrics", &bm)
	metric := func(prefix, unit string) (float64, bool) {
		for name, m := range bm {
			if name == prefix || strings.HasPrefix(name, prefix+"-") {
				v, ok := m[unit]
				return v, ok
			}
		}
		return 0, false
	}
	var ts []target
	if r, ok := metric("BenchmarkGraphPoolDecode/capture=pool", "pool/largest"); ok {
		sum, _ := metric("BenchmarkGraphPoolDecode/capture=pool", "sum/largest")
		ts = append(ts, target{bytesWhat, fmt.Sprintf("%.3f× (no pool: %.1f×)", r, sum), verdictOf(r <= 1.1)})
	} else {
		ts = append(ts, target{bytesWhat, "not measured in this run", "n/a"})
	}
	pool, ok1 := metric("BenchmarkGraphPoolDecode/replay=pool", "ns/replay")
	none, ok2 := metric("BenchmarkGraphPoolDecode/replay=no_pool", "ns/replay")
	if ok1 && ok2 && none > 0 {
		ts = append(ts, target{replayWhat, fmt.Sprintf("%.0f ns vs %.0f ns (%.2f×)", pool, none, pool/none), verdictOf(pool <= 1.1*none)})
	} else {
		ts = append(ts, target{replayWhat, "not measured in this run", "n/a"})
	}
	return ts
}

func sizeLabel(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// deviceLine says what ran: the device, the runtime, the date.
func deviceLine(steps []Step) string {
	d := find(steps, "device")
	var name, date, smi, backend string
	figure(d, "device", &name)
	figure(d, "date", &date)
	figure(d, "nvidia_smi", &smi)
	if len(steps) > 0 {
		backend = steps[0].Backend
	}
	if name == "" {
		name = "device not opened"
	}
	s := fmt.Sprintf("%s, backend %s, %s", name, backend, date)
	if smi != "" {
		s += " (nvidia-smi: " + smi + ")"
	}
	if len(steps) > 0 && steps[0].Fake {
		s += " — FAKE runtimes, small sizes: these figures prove the kit, not the hardware"
	}
	return s
}

func stepsTable(b *strings.Builder, steps []Step) {
	b.WriteString("| step | status | rc | seconds | timeout s |\n|---|---|---|---|---|\n")
	total := 0.0
	for _, s := range steps {
		fmt.Fprintf(b, "| %s | %s | %d | %.1f | %.0f |\n", s.Step, s.Status, s.RC, s.Seconds, s.Timeout)
		total += s.Timeout
	}
	fmt.Fprintf(b, "\n%d of 10 steps; timeouts sum to %.0f s.\n", len(steps), total)
}

func targetsTable(b *strings.Builder, steps []Step) {
	b.WriteString("| target | figure | verdict |\n|---|---|---|\n")
	for _, t := range targets(steps) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", t.What, t.Figure, t.Verdict)
	}
}

func collTable(b *strings.Builder, steps []Step) {
	var rep collReport
	if !figure(find(steps, "collectives_bench"), "report", &rep) || len(rep.Rows) == 0 {
		b.WriteString("No collectives figures.\n")
		return
	}
	fmt.Fprintf(b, "One collective per graph, replayed back to back on every rank's stream; device-to-device copy of %s: %.1f GB/s (read + write). Empty kernel's graph replay:", sizeLabel(rep.CopyBytes), rep.CopyGBps)
	var ks []int
	for k := range rep.EmptyNs {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for i, k := range ks {
		sep := ","
		if i == len(ks)-1 {
			sep = "."
		}
		fmt.Fprintf(b, " %d ranks %s%s", k, nsLabel(rep.EmptyNs[k]), sep)
	}
	b.WriteString("\n\n| ranks | collective | replay | eager | over empty | busbw GB/s | traffic / copy | captured / eager |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		if r.Err != "" {
			fmt.Fprintf(b, "| %d | %s | FAILED: %s | | | | | |\n", r.Ranks, r.Case, strings.ReplaceAll(r.Err, "|", "/"))
			continue
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %.3g | %.3g | %.3g | %.3g |\n", r.Ranks, r.Case, nsLabel(r.CapturedNs), nsLabel(r.EagerNs),
			r.OverEmpty, r.BusBWGBps, r.BWOverCopy, r.CapturedOverEag)
	}
}

func nsLabel(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

// motivating is the probe that motivated the device heap (a multi-GPU
// library on MI355X whose heap re-published its peer table at every
// allocation; docs/device-collectives.md): only its device barrier was
// capturable.
var motivating = map[string]string{
	"device_barrier":      "CAPTURABLE",
	"all_reduce_one_shot": "NOT CAPTURABLE",
	"all_reduce_two_shot": "NOT CAPTURABLE",
	"all_gather":          "NOT CAPTURABLE",
	"reduce_scatter":      "NOT CAPTURABLE",
	"all_to_all":          "NOT CAPTURABLE",
}

func capprobeTable(b *strings.Builder, steps []Step) {
	s := find(steps, "capprobe")
	var verdicts map[string]map[string]string
	var order []string
	if !figure(s, "verdicts", &verdicts) || !figure(s, "order", &order) || len(order) == 0 {
		b.WriteString("No capprobe figures.\n")
		return
	}
	b.WriteString("| op | global | threadlocal | relaxed | MI355X (motivating probe) |\n|---|---|---|---|---|\n")
	for _, op := range order {
		v := verdicts[op]
		m := motivating[op]
		if m == "" {
			m = "–"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", op, v["global"], v["threadlocal"], v["relaxed"], m)
	}
	var unexpected []string
	if figure(s, "unexpected", &unexpected) && len(unexpected) > 0 {
		b.WriteString("\nVerdicts that differ from CUDA's rules:\n\n")
		for _, u := range unexpected {
			fmt.Fprintf(b, "- %s\n", u)
		}
	}
}

func truthList(b *strings.Builder, steps []Step) {
	s := find(steps, "truth")
	var skipped string
	if figure(s, "skipped", &skipped) {
		fmt.Fprintf(b, "Not run: %s.\n", skipped)
		return
	}
	var changed []string
	var compared int
	if !figure(s, "changed", &changed) {
		b.WriteString("No cudatruth figures.\n")
		return
	}
	figure(s, "compared", &compared)
	if len(changed) == 0 {
		fmt.Fprintf(b, "No verdict changed from the committed H100 table (%d cases compared).\n", compared)
		return
	}
	fmt.Fprintf(b, "%d verdict(s) changed from the committed H100 table (%d cases compared):\n\n", len(changed), compared)
	for _, c := range changed {
		fmt.Fprintf(b, "- %s\n", c)
	}
}

// resultsMarkdown is results.md: what ran, the targets, the tables, and
// the failed steps' logs.
func resultsMarkdown(steps []Step) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# GPU kit run: %s\n\n", deviceLine(steps))
	b.WriteString("## Steps\n\n")
	stepsTable(&b, steps)
	b.WriteString("\n## Targets (issue 28; a miss is a finding)\n\n")
	targetsTable(&b, steps)
	b.WriteString("\n## Collectives (cmd/collbench)\n\n")
	collTable(&b, steps)
	b.WriteString("\n## Capture probe (capprobe -mode=all -check)\n\n")
	capprobeTable(&b, steps)
	b.WriteString("\n## cudatruth against the committed H100 table\n\n")
	truthList(&b, steps)
	b.WriteString("\n## Other figures\n\n")
	for _, s := range steps {
		switch s.Step {
		case "collectives_bench", "capprobe":
			continue
		}
		f := map[string]any{}
		for k, v := range s.Figures {
			if k != "verdicts" {
				f[k] = v
			}
		}
		j, _ := json.Marshal(f)
		fmt.Fprintf(&b, "- **%s**: `%s`\n", s.Step, strings.ReplaceAll(string(j), "`", "'"))
	}
	for _, s := range steps {
		if s.Status == statusFailed || s.Status == statusTimeout {
			fmt.Fprintf(&b, "\n## %s: %s (rc %d)\n\n```\n$ %s\n%s\n```\n", s.Step, s.Status, s.RC, s.Command, s.LogTail)
		}
	}
	return b.String()
}
