// Command gpurun is the GPU kit's runner (docs/gpu-kit.md): .ci/gpu calls
// it. It has no Go toolchain to lean on (the device machine has none): the
// steps run prebuilt binaries (.ci/gpu build), each under its own timeout
// in a process group of its own, killed whole when the timeout passes.
//
//	gpurun run -bin DIR [-fake] [-backend=cuda|hip] [-out DIR]   # the twelve steps
//	gpurun record [-root .] DIR                                  # file a run, regenerate the docs' tables
//	gpurun regen [-root .]                                       # regenerate the docs' tables only
//	gpurun check [-fake] DIR                                     # CI: is the run complete, did every step pass
//
// run writes results.json (a list of steps: step, command, rc, seconds,
// timeout_s, status, figures, log_tail; "fake": true over the fake
// runtimes), results.md and the steps' logs into -out ($OUT when set,
// else gpurun/results), and exits 0 when every step passed, 1 otherwise:
// a step that fails does not stop the ones after it.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
}

func cli(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: gpurun run|record|regen|check [flags]")
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "record":
		return recordCmd(args[1:], stdout, stderr)
	case "regen":
		return regenCmd(args[1:], stdout, stderr)
	case "check":
		return checkCmd(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "gpurun: unknown verb %q (want run, record, regen or check)\n", args[0])
	return 2
}

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpurun run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "", "folder of the prebuilt binaries (required)")
	root := fs.String("root", ".", "the repository's root")
	fake := fs.Bool("fake", false, "run over the fake runtimes in -fakelibs, with small sizes")
	fakeLibs := fs.String("fakelibs", "gpurun/fake", "folder of the fake runtimes' libraries")
	backend := fs.String("backend", "cuda", "cuda or hip")
	out := fs.String("out", "", "where results go (default $OUT, else gpurun/results)")
	only := fs.String("only", "", "run only the steps named here (comma separated; the others are recorded as skipped)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *bin == "" || (*backend != "cuda" && *backend != "hip") {
		fmt.Fprintln(stderr, "gpurun run: -bin is required and -backend must be cuda or hip")
		return 2
	}
	if *out == "" {
		*out = os.Getenv("OUT")
	}
	if *out == "" {
		*out = filepath.Join(*root, "gpurun", "results")
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		fmt.Fprintln(stderr, "gpurun:", err)
		return 1
	}
	cfg := config{Root: absRoot, Backend: *backend, Fake: *fake, Only: *only}
	for _, p := range []struct {
		dst *string
		src string
	}{{&cfg.Bin, *bin}, {&cfg.Out, *out}, {&cfg.FakeLibs, *fakeLibs}} {
		if *p.dst, err = filepath.Abs(p.src); err != nil {
			fmt.Fprintln(stderr, "gpurun:", err)
			return 1
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		fmt.Fprintln(stderr, "gpurun:", err)
		return 1
	}
	steps, err := runAll(cfg, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "gpurun:", err)
		return 1
	}
	for _, s := range steps {
		if s.Status != statusPassed && s.Status != statusSkipped {
			return 1
		}
	}
	return 0
}

// parseRoot parses args for the subcommand cmd, whose one flag is -root:
// the flag set and the root, or ok false when they did not parse (the
// flag set said why; exit 2).
func parseRoot(cmd string, args []string, stderr io.Writer) (fs *flag.FlagSet, root string, ok bool) {
	fs = flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&root, "root", ".", "the repository's root")
	err := fs.Parse(args)
	return fs, root, err == nil
}

func recordCmd(args []string, stdout, stderr io.Writer) int {
	fs, root, ok := parseRoot("gpurun record", args, stderr)
	if !ok {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: gpurun record [-root .] DIR (a run's results: results.json and what came with it)")
		return 2
	}
	dir, err := record(root, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "gpurun record:", err)
		return 1
	}
	fmt.Fprintf(stdout, "recorded under %s\n", dir)
	return regenerateCmd("gpurun record", root, stdout, stderr)
}

func regenCmd(args []string, stdout, stderr io.Writer) int {
	_, root, ok := parseRoot("gpurun regen", args, stderr)
	if !ok {
		return 2
	}
	return regenerateCmd("gpurun regen", root, stdout, stderr)
}

// regenerateCmd regenerates the documents under root from the recorded
// runs and says which, for the command cmd: its exit status.
func regenerateCmd(cmd, root string, stdout, stderr io.Writer) int {
	if err := regenerate(root); err != nil {
		fmt.Fprintln(stderr, cmd+":", err)
		return 1
	}
	fmt.Fprintf(stdout, "regenerated %s, %s and %s\n", benchmarksDoc, collectivesDoc, autoTableFile)
	return 0
}

func checkCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpurun check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fake := fs.Bool("fake", false, "the run must be a fake one")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: gpurun check [-fake] DIR")
		return 2
	}
	steps, err := readResults(filepath.Join(fs.Arg(0), "results.json"))
	if err == nil {
		err = check(steps, *fake)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpurun check:", err)
		return 1
	}
	fmt.Fprintf(stdout, "gpurun check: %d steps, every one passed\n", len(steps))
	return 0
}
