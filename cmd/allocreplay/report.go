package main

import (
	"fmt"
	"io"

	"github.com/capalloc/capalloc/alloc/memmap"
)

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
	// Replayed as made: captures begun (pools: graph pools made for
	// them), workspace and AllocSync allocations.
	captures, pools, workspaces, syncs int
	eager                              bool // -eager: every allocation an eager Alloc
	fallbacks                          [fallbackKinds]int
}

// failure is a request at event seq and how the replay answered it (err
// nil: it succeeded).
type failure struct {
	seq  uint64
	size int64
	err  error
}

// fallbackKind is a reason the replay made events otherwise than the
// engine did; the report prints one line per reason with its count.
type fallbackKind int

const (
	fallbackOld fallbackKind = iota
	fallbackUncaptured
	fallbackWorkspace
	fallbackNested
	fallbackMode
	fallbackBegin
	fallbackEnd
	fallbackKinds
)

var fallbackText = [fallbackKinds]string{
	fallbackOld:        "allocations replayed as eager Alloc: the history is older than format 2 and does not say which were made in captures, into graph pools, as workspaces or by AllocSync",
	fallbackUncaptured: "graph-owned allocations replayed as eager Alloc: their capture is not replayed (it began before the oldest event kept, or the replay could not begin it)",
	fallbackWorkspace:  "workspace allocations replayed as eager Alloc: the replay's workspace of that name was large enough already (a free the history lacks)",
	fallbackNested:     "capture-begin events ignored: another capture was recording",
	fallbackMode:       "captures of an unknown mode begun as global",
	fallbackBegin:      "captures the replay could not begin (their allocations eager)",
	fallbackEnd:        "captures that failed in the history or in the replay but not both (the graph released at once)",
}

func (r *result) fallback(k fallbackKind) { r.fallbacks[k]++ }

// reproduced counts the recorded out-of-memory errors the replay met too.
func (r *result) reproduced() int {
	n := 0
	for _, f := range r.ooms {
		if f.err != nil {
			n++
		}
	}
	return n
}

func (r *result) print(w io.Writer, h memmap.History, backend string, expandable bool) {
	size := memmap.SizeText
	mode := ""
	if expandable {
		mode = ", expandable segments"
	}
	if r.eager {
		mode += ", every allocation an eager Alloc (-eager)"
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
	if r.captures+r.workspaces+r.syncs > 0 {
		fmt.Fprintf(w, "  as made: captures %d (graph pools %d), workspace allocations %d, AllocSync allocations %d\n", r.captures, r.pools, r.workspaces, r.syncs)
	}
	for k, n := range r.fallbacks {
		if n > 0 {
			fmt.Fprintf(w, "  fallback: %d %s\n", n, fallbackText[k])
		}
	}
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
