// Command allocview renders an allocation history read back from a file
// as one self-contained HTML page (inline SVG and CSS, no script, nothing
// fetched): the timeline of bytes in use by call site over bytes
// reserved, captures shaded while they record, out-of-memory errors
// marked, and the history's summary. The file is what
// alloc.Options.HistoryFile writes at an out-of-memory error (history_file
// in CAPALLOC_ALLOC_CONF), what Allocator.WriteHistory writes, or the
// history.json view (one history or an array of them).
//
//	go run ./cmd/allocview history.json                 # writes history.html
//	go run ./cmd/allocview -o - history.json > out.html
//	go run ./cmd/allocview -from 1200 -to 1400 -baseline=out history.json
//	go run ./cmd/allocview -site decodeStep history.json
//
// The file is untrusted input: memmap.ReadHistories bounds and checks it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/capalloc/capalloc/alloc/allocview"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/internal/cliargs"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("allocview", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "the HTML file to write; - for stdout; default FILE with .html for .json")
	var v allocview.TimelineView
	fs.Uint64Var(&v.From, "from", 0, "first event shown (its sequence number)")
	fs.Uint64Var(&v.To, "to", 0, "last event shown; 0: the last")
	fs.StringVar(&v.Site, "site", "", "show only buffers allocated at call sites whose name contains this")
	baseline := fs.String("baseline", "in", "out: take out the bytes held throughout what is shown, so the axis spans the step")
	in, ok := cliargs.ParseOne(fs, args, "usage: allocview [-o OUT.html] [-from N] [-to N] [-site NAME] [-baseline=out] FILE.json")
	if !ok {
		return 2
	}
	switch *baseline {
	case "in":
	case "out":
		v.NoBaseline = true
	default:
		fmt.Fprintf(stderr, "allocview: -baseline=%q: want in or out\n", *baseline)
		return 2
	}
	if v.To != 0 && v.To < v.From {
		fmt.Fprintf(stderr, "allocview: -to %d is before -from %d\n", v.To, v.From)
		return 2
	}
	hs, err := memmap.ReadHistoryFile(in, memmap.DefaultHistoryLimits)
	if err != nil {
		fmt.Fprintln(stderr, "allocview:", err)
		return 1
	}
	var page bytes.Buffer
	if err := allocview.WriteHistoryPage(&page, hs, v); err != nil {
		fmt.Fprintln(stderr, "allocview:", err)
		return 1
	}
	switch dest := outName(in, *out); dest {
	case "-":
		if _, err := stdout.Write(page.Bytes()); err != nil {
			fmt.Fprintln(stderr, "allocview:", err)
			return 1
		}
	default:
		if err := os.WriteFile(dest, page.Bytes(), 0o644); err != nil {
			fmt.Fprintln(stderr, "allocview:", err)
			return 1
		}
		fmt.Fprintf(stdout, "wrote %s (%d histories, %d bytes)\n", dest, len(hs), page.Len())
	}
	return 0
}

// outName is where the page goes: out when given, else in with .html.
func outName(in, out string) string {
	if out != "" {
		return out
	}
	return strings.TrimSuffix(in, ".json") + ".html"
}
