// Command allocreplay replays an allocation history on a backend: the
// recorded allocations and frees, in order, with their sizes, on a fresh
// allocator, and each recorded out-of-memory request tried again at its
// place. It prints the peaks of bytes in use and reserved, the
// fragmentation, and which out-of-memory errors it reproduces, so an
// out-of-memory from the field becomes a test on a laptop: replay it on
// cpu with the device's size as memory_limit, then with -expandable, or
// with a change to the engine's allocations.
//
//	go run ./cmd/allocreplay history.json                        # cpu
//	go run ./cmd/allocreplay -backend=cpu:memory_limit=80GiB history.json
//	go run ./cmd/allocreplay -backend=cpu:memory_limit=80GiB -expandable history.json
//	go run ./cmd/allocreplay -backend=cpu:memory_limit=80GiB -eager history.json
//
// Each allocation is replayed through the call that made it, as the
// history says (memmap.HistoryFormat, docs/allocation-history.md;
// replay.go, graphs.go): the events between a capture-begin and its
// capture-end in a capture on the replay's allocator (BeginCapture or
// GraphPool.BeginCapture, in the recorded mode), so graph-owned memory is
// the graph's until its graph-close and a graph pool's memory is shared
// by the captures into it until its pool-close and last graph-close;
// workspaces through Workspace and ReleaseWorkspace (a larger one
// replacing the smaller); AllocSync buffers through AllocSync. What it
// cannot replay so is replayed as eager Allocs and counted, one
// "fallback:" line per reason: every allocation of a history older than
// format 2 (which does not say), the allocations of a capture whose begin
// is older than the history's oldest event (or that the replay could not
// begin). -eager replays every allocation as an eager Alloc, to compare.
// Recorded out-of-memory requests are retried at their place through
// the call that failed (Alloc in a history older than format 2). Buffers allocated before the history's
// oldest event are one buffer of their bytes, allocated first. The file
// is untrusted input: memmap.ReadHistories bounds and checks it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin"
	_ "github.com/capalloc/capalloc/cpu"
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/cliargs"
)

func main() {
	plugin.ServeIfChild() // so -backend=plugin:NAME can run this binary as its backend process
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("allocreplay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "cpu", "backend config to replay on ("+strings.Join(backends.Names(), ", ")+"), with options: cpu:memory_limit=16GiB")
	expandable := fs.Bool("expandable", false, "replay with expandable segments (Options.ExpandableSegments)")
	eager := fs.Bool("eager", false, "replay every allocation as an eager Alloc, captures, graph pools, workspaces and AllocSync included (to compare)")
	file, ok := cliargs.ParseOne(fs, args, "usage: allocreplay [-backend=cpu] [-expandable] [-eager] FILE.json")
	if !ok {
		return 2
	}
	hs, err := memmap.ReadHistoryFile(file, memmap.DefaultHistoryLimits)
	if err != nil {
		fmt.Fprintln(stderr, "allocreplay:", err)
		return 1
	}
	opened, err := backends.OpenString(context.Background(), *backend)
	if err != nil {
		fmt.Fprintln(stderr, "allocreplay:", err)
		return 1
	}
	defer opened.Driver.Close()
	for _, h := range hs {
		r, err := replay(h, opened.Driver, alloc.Options{ExpandableSegments: *expandable}, *eager)
		if err != nil {
			fmt.Fprintf(stderr, "allocreplay: history of %q: %v\n", h.Allocator, err)
			return 1
		}
		r.print(stdout, h, opened.Choice.String(), *expandable)
	}
	return 0
}

// replay runs h's events on a fresh allocator of drv: as the engine made
// them where h says how (replayer), else, or with eager, as eager Allocs.
func replay(h memmap.History, drv driver.Driver, opts alloc.Options, eager bool) (result, error) {
	r := result{eager: eager}
	opts.Name = ""
	a, err := alloc.New(drv, opts)
	if err != nil {
		return r, err
	}
	asMade := !eager && h.Format >= memmap.HistoryFormat
	p := newReplayer(a, &r, asMade)
	defer func() {
		p.close()
		a.Close()
	}()
	if len(h.Events) > 0 {
		first := h.Events[0]
		r.baseline = first.InUse
		switch first.Kind {
		case memmap.EventAlloc:
			r.baseline -= first.Size
		case memmap.EventFree:
			r.baseline += first.Size
		}
		if r.baseline > 0 {
			b, err := a.Alloc(r.baseline)
			if err != nil {
				return r, fmt.Errorf("the %d B in use before the history: %w", r.baseline, err)
			}
			p.live[0] = held{buf: b} // no event frees it
		}
	}
	for _, e := range h.Events {
		r.recordedInUse = max(r.recordedInUse, e.InUse)
		r.recordedReserv = max(r.recordedReserv, e.Reserved)
		if err := p.event(e); err != nil {
			return r, err
		}
	}
	if !asMade && !eager {
		r.fallbacks[fallbackOld] = r.allocs
	}
	st := a.Stats()
	r.peakInUse, r.peakReserved = st.PeakInUse, st.PeakReserved
	return r, nil
}
