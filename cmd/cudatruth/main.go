// Command cudatruth records what the CUDA runtime itself does, with no
// capalloc guard in the way, for each capture mode x calling thread x
// operation: the call's return code, the capture status after it, whether
// EndCapture still gives a graph. Each case runs in a subprocess of its own
// with a timeout, so a hang is recorded as HANG instead of hanging the
// tool. Beside each row it prints what the cpu backend (the emulation
// engines test against on laptops) does in the same case; where they
// differ, the cpu backend is wrong.
//
//	cudatruth                       # table, every case, both stream kinds
//	cudatruth -json                 # JSON array
//	cudatruth -compare              # exit 1 on a difference not yet known
//	cudatruth -cpu                  # the cpu column only (no GPU needed)
//	cudatruth -against testdata/h100-driver580-cuda13.0.json  # list changed verdicts
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// caseEnv carries the case a child runs.
const caseEnv = "CUDATRUTH_CASE"

func main() {
	if spec := os.Getenv(caseEnv); spec != "" {
		os.Exit(child(spec, os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Row is one case: the runtime's outcome and the cpu backend's.
type Row struct {
	Case    string
	CUDA    string // verdict (see verdict)
	CPU     string
	Match   bool
	Known   string `json:",omitempty"` // why a difference is accepted, if it is
	Raw     *truthResult
	CPUNote string `json:",omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cudatruth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print a JSON array")
	compare := fs.Bool("compare", false, "exit 1 if the runtime and the cpu backend differ in a case not listed as known")
	cpuOnly := fs.Bool("cpu", false, "print only the cpu backend's column (no CUDA needed)")
	parallel := fs.Int("parallel", 8, "cases run at once")
	timeout := fs.Duration("timeout", 20*time.Second, "a case still running after this is recorded as HANG")
	budget := fs.Duration("budget", 0, "start no case after this long (0: no limit); the cases left are recorded as \"not run\" and the table is still written")
	streams := fs.String("streams", "both", "stream kind: nonblocking, blocking or both")
	only := fs.String("only", "", "run only cases whose name contains this")
	againstFile := fs.String("against", "", "a table recorded with -json (testdata/*.json): list on stderr every case whose runtime verdict differs from it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cases, err := allCases(*streams, *only)
	if err != nil {
		fmt.Fprintln(stderr, "cudatruth:", err)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "cudatruth:", err)
		return 1
	}
	rows := make([]Row, len(cases))
	var stop time.Time // zero: no budget
	if *budget > 0 {
		stop = time.Now().Add(*budget)
	}
	var notRun atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, *parallel))
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r := Row{Case: c.String()}
			var note string
			r.CPU, note = cpuVerdict(c)
			r.CPUNote = note
			if *cpuOnly {
				rows[i] = r
				return
			}
			if !stop.IsZero() && time.Now().After(stop) {
				r.CUDA = verdictNotRun
				rows[i] = r
				notRun.Add(1)
				return
			}
			res, v := runChild(self, c, *timeout)
			r.Raw, r.CUDA = res, v
			r.Match = r.CUDA == r.CPU
			if !r.Match {
				r.Known = knownDifference(c, r.CUDA, r.CPU)
			}
			rows[i] = r
		}()
	}
	wg.Wait()
	if n := notRun.Load(); n > 0 {
		fmt.Fprintf(stderr, "cudatruth: -budget %v spent: %d of %d case(s) not run\n", *budget, n, len(cases))
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rows); err != nil {
			return 1
		}
	} else {
		printTable(stdout, rows, *cpuOnly)
	}
	if *againstFile != "" && !*cpuOnly {
		if err := against(*againstFile, rows, stderr); err != nil {
			fmt.Fprintln(stderr, "cudatruth:", err)
			return 1
		}
	}
	if *compare && !*cpuOnly {
		bad := 0
		for _, r := range rows {
			if !r.Match && r.Known == "" && r.CUDA != verdictSkipped && r.CUDA != verdictNotRun && r.CPU != verdictNA {
				fmt.Fprintf(stderr, "cudatruth: %s: runtime %s, cpu backend %s\n", r.Case, r.CUDA, r.CPU)
				bad++
			}
		}
		if bad > 0 {
			fmt.Fprintf(stderr, "cudatruth: %d case(s) where the cpu backend does not do what the runtime does\n", bad)
			return 1
		}
	}
	return 0
}

func allCases(streams, only string) ([]truthCase, error) {
	var kinds []bool
	switch streams {
	case "both":
		kinds = []bool{false, true}
	case "nonblocking":
		kinds = []bool{false}
	case "blocking":
		kinds = []bool{true}
	default:
		return nil, fmt.Errorf("-streams=%q: want nonblocking, blocking or both", streams)
	}
	var out []truthCase
	for _, blocking := range kinds {
		for _, m := range truthModes {
			for _, caller := range truthCallers {
				for _, op := range truthOps {
					c := truthCase{Mode: m, Caller: caller, Op: op, Blocking: blocking}
					if only == "" || strings.Contains(c.String(), only) {
						out = append(out, c)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no case matches -only=%q", only)
	}
	return out, nil
}

// Verdicts, the same words for the runtime and the cpu backend.
const (
	verdictOK          = "ok"                  // succeeded, capture intact
	verdictRefused     = "refused"             // failed, capture intact
	verdictInvalidates = "refused+invalidated" // failed and broke the capture
	verdictSilent      = "ok+invalidated"      // "succeeded" but broke the capture
	verdictHang        = "HANG"
	verdictSkipped     = "skipped" // the runtime lacks a call
	verdictNotRun      = "not run" // -budget was spent before the case started
	verdictNA          = "n/a"     // the cpu backend has no such call
)

func verdict(failed, invalidated bool) string {
	switch {
	case !failed && !invalidated:
		return verdictOK
	case failed && !invalidated:
		return verdictRefused
	case failed:
		return verdictInvalidates
	}
	return verdictSilent
}

// runChild runs one case in a subprocess of this binary.
func runChild(self string, c truthCase, timeout time.Duration) (*truthResult, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), caseEnv+"="+encodeCase(c))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, verdictHang
	}
	var res truthResult
	if jerr := json.Unmarshal([]byte(lastLine(out.String())), &res); jerr != nil {
		msg := strings.TrimSpace(errb.String())
		if err == nil {
			err = jerr
		}
		return nil, fmt.Sprintf("error: %v: %s", err, lastLine(msg))
	}
	if res.Skipped != "" {
		return &res, verdictSkipped
	}
	return &res, verdict(res.Code != 0, res.Invalidated())
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func encodeCase(c truthCase) string { return c.String() }

func decodeCase(s string) (truthCase, error) {
	p := strings.Split(s, "/")
	if len(p) != 4 || (p[2] != "blocking" && p[2] != "nonblocking") {
		return truthCase{}, fmt.Errorf("bad case %q (want mode/caller/blocking|nonblocking/op)", s)
	}
	return truthCase{Mode: p[0], Caller: p[1], Blocking: p[2] == "blocking", Op: p[3]}, nil
}

// child runs one case and prints its result as one JSON line.
func child(spec string, stdout, stderr io.Writer) int {
	c, err := decodeCase(spec)
	if err != nil {
		fmt.Fprintln(stderr, "cudatruth:", err)
		return 2
	}
	res, err := runTruthCase(c)
	if err != nil {
		fmt.Fprintln(stderr, "cudatruth:", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(b))
	return 0
}

func printTable(w io.Writer, rows []Row, cpuOnly bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if cpuOnly {
		fmt.Fprintln(tw, "CASE\tCPU")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\n", r.Case, r.CPU)
		}
		tw.Flush()
		return
	}
	fmt.Fprintln(tw, "CASE\tCUDA\tCODE\tSTATUS AFTER\tEND\tCPU\t")
	for _, r := range rows {
		code, status, end := "-", "-", "-"
		if r.Raw != nil && r.Raw.Skipped == "" {
			code = fmt.Sprint(r.Raw.Code)
			status = fmt.Sprint(r.Raw.StatusAfter)
			end = fmt.Sprint(r.Raw.EndCode)
		}
		mark := ""
		switch {
		case r.Match:
		case r.Known != "":
			mark = "known: " + r.Known
		case r.CUDA == verdictSkipped || r.CUDA == verdictNotRun || r.CPU == verdictNA:
		default:
			mark = "<< DIFFERS"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Case, r.CUDA, code, status, end, r.CPU, mark)
	}
	tw.Flush()
}

var errNA = errors.New("no such call in the cpu backend")
