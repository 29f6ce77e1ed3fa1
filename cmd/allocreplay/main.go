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
//
// What a history holds is replayed as eager allocations on the
// allocator's pool: allocations made inside captures, workspaces and
// AllocSync buffers too (a history does not say which allocations were
// AllocSync). Buffers allocated before the history's oldest event are one
// buffer of their bytes, allocated first. The file is untrusted input:
// memmap.ReadHistories bounds and checks it.
package main

import (
	"context"
	"errors"
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
	file, ok := cliargs.ParseOne(fs, args, "usage: allocreplay [-backend=cpu] [-expandable] FILE.json")
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
		r, err := replay(h, opened.Driver, alloc.Options{ExpandableSegments: *expandable})
		if err != nil {
			fmt.Fprintf(stderr, "allocreplay: history of %q: %v\n", h.Allocator, err)
			return 1
		}
		r.print(stdout, h, opened.Choice.String(), *expandable)
	}
	return 0
}

// result is what a replay found.
type result struct {
	allocs, frees  int
	unknownFrees   int   // frees of buffers allocated before the history
	baseline       int64 // bytes in use before its oldest event, allocated as one buffer
	failedAllocs   []failure
	ooms           []failure // the recorded out-of-memory requests, tried again
	peakInUse      int64
	peakReserved   int64
	recordedInUse  int64
	recordedReserv int64
}

// failure is a request at event seq and how the replay answered it (err
// nil: it succeeded).
type failure struct {
	seq  uint64
	size int64
	err  error
}

// replay runs h's allocations and frees on a fresh allocator of drv.
func replay(h memmap.History, drv driver.Driver, opts alloc.Options) (result, error) {
	var r result
	opts.Name = ""
	a, err := alloc.New(drv, opts)
	if err != nil {
		return r, err
	}
	live := map[driver.DevicePtr]alloc.Buffer{}
	defer func() {
		for _, b := range live {
			a.Free(b)
		}
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
			live[0] = b // no event frees it
		}
	}
	for _, e := range h.Events {
		r.recordedInUse = max(r.recordedInUse, e.InUse)
		r.recordedReserv = max(r.recordedReserv, e.Reserved)
		switch e.Kind {
		case memmap.EventAlloc:
			r.allocs++
			if old, ok := live[e.Addr]; ok { // its free was not recorded
				a.Free(old)
			}
			b, err := a.Alloc(e.Size)
			if err != nil {
				if !errors.Is(err, alloc.ErrOutOfMemory) {
					return r, fmt.Errorf("event %d: %w", e.Seq, err)
				}
				r.failedAllocs = append(r.failedAllocs, failure{e.Seq, e.Size, err})
				delete(live, e.Addr)
				continue
			}
			live[e.Addr] = b
		case memmap.EventFree:
			r.frees++
			b, ok := live[e.Addr]
			if !ok {
				r.unknownFrees++
				continue
			}
			delete(live, e.Addr)
			if err := a.Free(b); err != nil {
				return r, fmt.Errorf("event %d: %w", e.Seq, err)
			}
		case memmap.EventOutOfMemory:
			if e.Size <= 0 {
				continue
			}
			b, err := a.Alloc(e.Size)
			if err == nil {
				a.Free(b) // it failed in the field: nothing kept it
			} else if !errors.Is(err, alloc.ErrOutOfMemory) {
				return r, fmt.Errorf("event %d: %w", e.Seq, err)
			}
			r.ooms = append(r.ooms, failure{e.Seq, e.Size, err})
		}
	}
	st := a.Stats()
	r.peakInUse, r.peakReserved = st.PeakInUse, st.PeakReserved
	return r, nil
}

// reproduced counts the recorded out-of-memory errors the replay met too.
func (r result) reproduced() int {
	n := 0
	for _, f := range r.ooms {
		if f.err != nil {
			n++
		}
	}
	return n
}

func (r result) print(w io.Writer, h memmap.History, backend string, expandable bool) {
	size := memmap.SizeText
	mode := ""
	if expandable {
		mode = ", expandable segments"
	}
	fmt.Fprintf(w, "replayed the history of allocator %q (backend %q, %d events) on %s%s\n", h.Allocator, h.Backend, len(h.Events), backend, mode)
	fmt.Fprintf(w, "  allocations %d, frees %d", r.allocs, r.frees)
	if r.unknownFrees > 0 {
		fmt.Fprintf(w, " (%d of buffers allocated before the history)", r.unknownFrees)
	}
	if r.baseline > 0 {
		fmt.Fprintf(w, "; %s in use before the history, allocated first as one buffer", size(r.baseline))
	}
	fmt.Fprintln(w)
	frag := 0.0
	if r.peakInUse > 0 {
		frag = float64(r.peakReserved) / float64(r.peakInUse)
	}
	fmt.Fprintf(w, "recorded: peak in use %s, peak reserved %s\n", size(r.recordedInUse), size(r.recordedReserv))
	fmt.Fprintf(w, "replayed: peak in use %s, peak reserved %s, fragmentation (peak reserved / peak in use) %.2f\n", size(r.peakInUse), size(r.peakReserved), frag)
	fmt.Fprintf(w, "out-of-memory errors reproduced: %d of %d recorded\n", r.reproduced(), len(r.ooms))
	for _, f := range r.ooms {
		if f.err != nil {
			fmt.Fprintf(w, "  event %d, %s: reproduced: %v\n", f.seq, size(f.size), f.err)
		} else {
			fmt.Fprintf(w, "  event %d, %s: not reproduced: the replay had room\n", f.seq, size(f.size))
		}
	}
	if n := len(r.failedAllocs); n > 0 {
		fmt.Fprintf(w, "out-of-memory errors the history does not have: %d\n", n)
		for _, f := range r.failedAllocs[:min(n, 10)] {
			fmt.Fprintf(w, "  event %d, %s: %v\n", f.seq, size(f.size), f.err)
		}
	}
}
