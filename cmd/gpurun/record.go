package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Where record files runs and which sections it regenerates.
const (
	recordDir      = "testdata/gpu"
	benchmarksDoc  = "BENCHMARKS.md"
	collectivesDoc = "docs/device-collectives.md"
	tablesSection  = "gpu-kit tables"
	probeSection   = "gpu-kit capprobe"
	maxRecordBytes = 1 << 20 // a larger file (a long log) is not committed
)

// errFake refuses results taken over the fake runtimes: a GPU figure in
// the docs must come from a GPU.
var errFake = errors.New("results taken over the fake runtimes (\"fake\": true) are not recorded")

func readResults(path string) ([]Step, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var steps []Step
	if err := json.Unmarshal(b, &steps); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%s: no steps", path)
	}
	return steps, nil
}

var reSlug = regexp.MustCompile(`[^a-z0-9]+`)

// runName is the folder a run is filed under: <device>-<date>, the
// device as its name says it, the backend when it is not cuda.
func runName(steps []Step) (string, error) {
	d := find(steps, "device")
	var name, date string
	figure(d, "device", &name)
	figure(d, "date", &date)
	if name == "" || date == "" {
		return "", errors.New("the device step names no device or date: nothing ran on a device")
	}
	name = strings.TrimPrefix(name, steps[0].Backend+":")
	if i := strings.Index(name, " ("); i > 0 { // "(runtime 13.0, driver 13.0)"
		name = name[:i]
	}
	slug := strings.Trim(reSlug.ReplaceAllString(strings.ToLower(name), "-"), "-")
	slug = strings.TrimPrefix(strings.TrimLeft(slug, "0123456789"), "-") // the device index
	if steps[0].Backend != "cuda" {
		slug += "-" + steps[0].Backend
	}
	return slug + "-" + date, nil
}

// record copies a run's results from dir into testdata/gpu/<run>/ under
// root and returns that folder. Fake results are refused.
func record(root, dir string) (string, error) {
	steps, err := readResults(filepath.Join(dir, "results.json"))
	if err != nil {
		return "", err
	}
	for _, s := range steps {
		if s.Fake {
			return "", errFake
		}
	}
	name, err := runName(steps)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(root, recordDir, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return "", err
		}
		if info.Size() > maxRecordBytes && e.Name() != "results.json" {
			fmt.Fprintf(os.Stderr, "gpurun record: %s is %d bytes: not committed (its tail is in results.json)\n", e.Name(), info.Size())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// recordedRuns are the runs under testdata/gpu, by folder name.
func recordedRuns(root string) ([]string, map[string][]Step, error) {
	files, err := filepath.Glob(filepath.Join(root, recordDir, "*", "results.json"))
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(files)
	var names []string
	runs := map[string][]Step{}
	for _, f := range files {
		steps, err := readResults(f)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range steps {
			if s.Fake {
				return nil, nil, fmt.Errorf("%s: %w", f, errFake)
			}
		}
		name := filepath.Base(filepath.Dir(f))
		names = append(names, name)
		runs[name] = steps
	}
	return names, runs, nil
}

// regenerate rewrites the generated sections of BENCHMARKS.md and
// docs/device-collectives.md, and the device heap's Auto crossover table
// (symheap/autotable.go), from every recorded run.
func regenerate(root string) error {
	names, runs, err := recordedRuns(root)
	if err != nil {
		return err
	}
	var tables, probes strings.Builder
	if len(names) == 0 {
		tables.WriteString("No GPU run recorded yet.\n")
		probes.WriteString("No GPU run recorded yet.\n")
	}
	for _, n := range names {
		steps := runs[n]
		fmt.Fprintf(&tables, "### %s\n\n%s. Files: `%s/%s/`.\n\n", n, deviceLine(steps), recordDir, n)
		stepsTable(&tables, steps)
		tables.WriteString("\n")
		targetsTable(&tables, steps)
		tables.WriteString("\n")
		collTable(&tables, steps)
		tables.WriteString("\ncudatruth: ")
		truthList(&tables, steps)
		tables.WriteString("\n")
		fmt.Fprintf(&probes, "capprobe on %s (`%s/%s/`):\n\n", deviceLine(steps), recordDir, n)
		capprobeTable(&probes, steps)
		probes.WriteString("\n")
	}
	if err := replaceSection(filepath.Join(root, benchmarksDoc), tablesSection, tables.String()); err != nil {
		return err
	}
	if err := replaceSection(filepath.Join(root, collectivesDoc), probeSection, probes.String()); err != nil {
		return err
	}
	auto, err := autoTable(names, runs)
	if err != nil {
		return err
	}
	return os.WriteFile(autoTablePath(root), auto, 0o644)
}

func markers(section string) (begin, end string) {
	return "<!-- BEGIN GENERATED: " + section + " (.ci/gpu record; do not edit) -->",
		"<!-- END GENERATED: " + section + " -->"
}

// replaceSection replaces what lies between the section's markers in the
// file with body; the markers must be there, once each, in order.
func replaceSection(path, section, body string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	begin, end := markers(section)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i || strings.Count(s, begin) != 1 || strings.Count(s, end) != 1 {
		return fmt.Errorf("%s: want the markers %q and %q once each, in that order", path, begin, end)
	}
	out := s[:i+len(begin)] + "\n" + strings.TrimRight(body, "\n") + "\n" + s[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}

// check is nil when steps is a complete run (the twelve steps, in order)
// whose every step passed or was skipped because the backend has no tool
// for it (never for a -only), fake when fake is set.
func check(run []Step, fake bool) error {
	defs := steps(config{Backend: "cuda"})
	if len(run) != len(defs) {
		return fmt.Errorf("%d steps, want %d", len(run), len(defs))
	}
	var bad []string
	for i, s := range run {
		if s.Step != defs[i].Name {
			return fmt.Errorf("step %d is %q, want %q", i+1, s.Step, defs[i].Name)
		}
		if fake && !s.Fake {
			bad = append(bad, s.Step+": not a fake run")
		}
		var why string
		switch {
		case s.Status == statusPassed:
		case s.Status == statusSkipped && figure(&s, "skipped", &why) && why != skippedOnly:
		default:
			bad = append(bad, fmt.Sprintf("%s: %s (rc %d)", s.Step, s.Status, s.RC))
		}
	}
	if len(bad) > 0 {
		return errors.New("steps that did not pass: " + strings.Join(bad, "; "))
	}
	return nil
}
