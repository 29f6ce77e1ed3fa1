// Command capprobe runs the capture probe matrix on a backend and prints one
// row per operation: whether it can be captured into a graph, proven by
// replays with fresh inputs compared against eager runs.
//
//	go run ./cmd/capprobe                      # cpu backend, global mode
//	go run ./cmd/capprobe -mode=all --json     # every mode, JSON
//	go run ./cmd/capprobe -backends            # which backends open here, and why not
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin"
	_ "github.com/capalloc/capalloc/cpu"
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/probe"
)

func main() {
	plugin.ServeIfChild() // so -backend=plugin:NAME can run this binary as its backend process
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("capprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := os.Getenv("CAPALLOC_BACKEND")
	if def == "" {
		def = "cpu"
	}
	backend := fs.String("backend", def, "backend config to probe: a name ("+strings.Join(backends.Names(), ", ")+"), with options (cpu:memory_limit=1GiB), or a fallback chain (cuda;cpu); default $CAPALLOC_BACKEND or cpu")
	modeFlag := fs.String("mode", "global", "capture mode: global, threadlocal, relaxed or all")
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	replays := fs.Int("replays", 20, "fresh-data replays that prove each CAPTURABLE row")
	check := fs.Bool("check", false, "exit 1 if any verdict differs from CUDA's rules")
	list := fs.Bool("backends", false, "list the backends the conformance suite's default run covers, whether each opens here, and why not; probe nothing")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		printBackends(stdout, backends.Survey(context.Background(), surveyTargets...))
		return 0
	}
	modes, err := parseModes(*modeFlag)
	if err != nil {
		fmt.Fprintln(stderr, "capprobe:", err)
		return 2
	}
	opened, err := backends.OpenString(context.Background(), *backend)
	if err != nil {
		fmt.Fprintln(stderr, "capprobe:", err)
		return 1
	}
	drv := opened.Driver
	defer drv.Close()
	if len(opened.Skipped) > 0 {
		fmt.Fprintln(stderr, "capprobe:", opened.Report())
	}

	var rows []row
	var t *table
	if !*asJSON { // the table prints each row as it finishes
		t = newTable(stdout, drv, modes)
	}
	for _, m := range modes {
		err := probe.Stream(drv, m, *replays, func(r probe.Result) {
			rows = append(rows, row{Result: r, Expected: probe.ExpectedFor(drv.Info(), r.Op, m)})
			if t != nil {
				t.print(rows[len(rows)-1])
			}
		})
		if err != nil {
			fmt.Fprintln(stderr, "capprobe:", err)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			fmt.Fprintln(stderr, "capprobe:", err)
			return 1
		}
	}
	if *check {
		for _, r := range rows {
			if r.Verdict != r.Expected {
				fmt.Fprintf(stderr, "capprobe: %s/%s: got %s, CUDA's rules give %s\n", r.Mode, r.Op, r.Verdict, r.Expected)
				return 1
			}
		}
	}
	return 0
}

// row is a probe result with the verdict CUDA's rules predict.
type row struct {
	probe.Result
	Expected probe.Verdict `json:"expected"`
}

func parseModes(s string) ([]alloc.CaptureMode, error) {
	if s == "all" {
		return driver.Modes(), nil
	}
	m, err := driver.ParseCaptureMode(s)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown capture mode %q (want global, threadlocal, relaxed or all)", alloc.ErrInvalidValue, s)
	}
	return []alloc.CaptureMode{m}, nil
}

// table prints the probe's rows one by one, as each finishes, in columns
// sized beforehand from every mode and operation name (a row cannot wait
// for the widest one).
type table struct {
	w              io.Writer
	modeW, opW, vW int
}

// newTable prints the header, which says how many rows are coming.
func newTable(w io.Writer, drv driver.Driver, modes []alloc.CaptureMode) *table {
	ops := probe.OpsFor(drv)
	t := &table{w: w, modeW: len("MODE"), opW: len("OP"), vW: len("VERDICT")}
	for _, m := range modes {
		t.modeW = max(t.modeW, len(m.String()))
	}
	for _, op := range ops {
		t.opW = max(t.opW, len(op))
	}
	for _, v := range []probe.Verdict{probe.Capturable, probe.NotCapturable, probe.WrongResult} {
		t.vW = max(t.vW, len(v))
	}
	info := drv.Info()
	count := fmt.Sprintf("%d rows, one per operation", len(ops))
	if len(modes) > 1 {
		count = fmt.Sprintf("%d rows (%d operations x %d modes)", len(modes)*len(ops), len(ops), len(modes))
	}
	fmt.Fprintf(w, "capture probe: backend %s (%s, %d MiB, capture safety %s): %s, each printed as it finishes\n\n",
		drv.Name(), info.Name, info.TotalMemory>>20, info.SafetyProfile(), count)
	t.line("MODE", "OP", "VERDICT", "REASON")
	return t
}

func (t *table) print(r row) {
	reason := r.Error
	if reason == "" {
		reason = r.Note
	}
	if r.Verdict != r.Expected {
		reason = fmt.Sprintf("UNEXPECTED (CUDA gives %s) %s", r.Expected, reason)
	}
	t.line(r.Mode, r.Op, string(r.Verdict), reason)
}

func (t *table) line(mode, op, verdict, reason string) {
	l := fmt.Sprintf("%-*s  %-*s  %-*s  %s", t.modeW, mode, t.opW, op, t.vW, verdict, reason)
	fmt.Fprintln(t.w, strings.TrimRight(l, " "))
}

// surveyTargets are the backends -backends also opens out of process, as
// the conformance suite's default run does: plugin:cpu.
var surveyTargets = []string{"cpu"}

// printBackends prints one entry per backend: "yes", or "no" with the
// reason, its continuation lines indented under it.
func printBackends(w io.Writer, avs []backends.Availability) {
	width := len("BACKEND")
	for _, av := range avs {
		width = max(width, len(av.Name))
	}
	fmt.Fprintf(w, "%-*s  OPENS HERE\n", width, "BACKEND")
	for _, av := range avs {
		if av.Err == nil {
			fmt.Fprintf(w, "%-*s  yes: %s, capture safety %s\n", width, av.Name, av.Info.Name, av.Info.SafetyProfile())
			continue
		}
		lines := strings.Split(strings.TrimRight(av.Err.Error(), "\n"), "\n")
		fmt.Fprintf(w, "%-*s  no: %s\n", width, av.Name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%-*s      %s\n", width, "", strings.TrimSpace(l))
		}
	}
}
