package conformance

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// notRun collects, during the default run, the backends the suite could not
// run here and why.
var notRun struct {
	sync.Mutex
	lines []string
}

func reportNotRun(name string, why error) {
	notRun.Lock()
	defer notRun.Unlock()
	notRun.lines = append(notRun.lines, notRunLine(name, why))
}

// notRunLine is one line per backend; the whole reason is in the -v log.
func notRunLine(name string, why error) string {
	reason := strings.TrimSpace(why.Error())
	if first, rest, multi := strings.Cut(reason, "\n"); multi {
		reason = fmt.Sprintf("%s (%d more lines: go test -v -run TestConformance ./conformance)", first, strings.Count(rest, "\n")+1)
	}
	return fmt.Sprintf("conformance: backend %s not run: %s", name, reason)
}

// printNotRun says, once the tests are done, which backends were left out.
// A passing package's output is dropped by `go test ./...` unless -v, and
// the README promises that the plain command says what it skipped: so the
// lines go to the go command's own standard output when that is a terminal
// or a pipe (never a regular file, where the go command's later writes at
// its own offset would overwrite them), else to ours.
func printNotRun() {
	notRun.Lock()
	lines := append([]string(nil), notRun.lines...)
	notRun.Unlock()
	if len(lines) == 0 {
		return
	}
	sort.Strings(lines)
	text := strings.Join(lines, "\n") + "\n"
	var w io.Writer = os.Stdout
	if !testing.Verbose() {
		if f := goCommandStdout(); f != nil {
			defer f.Close()
			w = f
		}
	}
	_, _ = io.WriteString(w, text)
}

// goCommandStdout opens the standard output of the go command that runs
// this test binary, if the parent is one and its output is a terminal or a
// pipe; nil otherwise (not Linux, another parent, a file).
func goCommandStdout() *os.File {
	ppid := os.Getppid()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ppid))
	if err != nil || filepath.Base(exe) != "go" {
		return nil
	}
	path := fmt.Sprintf("/proc/%d/fd/1", ppid)
	st, err := os.Stat(path)
	if err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeCharDevice) == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	return f
}

func TestNotRunLineIsOneLine(t *testing.T) {
	got := notRunLine("cuda", errors.New("backend unavailable: cuda: none loaded; tried:\n  a.so: missing\n  b.so: missing\n"))
	want := "conformance: backend cuda not run: backend unavailable: cuda: none loaded; tried: (2 more lines: go test -v -run TestConformance ./conformance)"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}
