package alloc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// WriteHistory writes the allocator's allocation timeline as JSON
// (memmap.History): its latest events, oldest first, each with its time,
// size, address, state, the bytes in use and reserved after it, and its
// call stack from the engine's call into the allocator. With
// Options.History 0 (the default) nothing is recorded and the history
// written is empty, with Capacity 0. It works after Close too: the
// events stay.
func (a *Allocator) WriteHistory(w io.Writer) error {
	d := historyData(a)
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(d); err != nil {
		return err
	}
	return bw.Flush()
}

// historyData copies the history out, under its lock only, and symbolizes
// it without.
func historyData(a *Allocator) memmap.History {
	d := memmap.History{Allocator: a.name, Backend: a.backend, Device: a.info.Name, Events: []memmap.Event{}, Stacks: [][]memmap.Frame{}}
	h := a.stats.hist
	if h == nil {
		return d
	}
	evs, recorded := h.copyOut()
	d.Start, d.Capacity, d.Recorded, d.Resolution = h.start, h.capacity, recorded, historyTick
	d.Events = make([]memmap.Event, len(evs))
	byPCs := map[[historyStack]uintptr]int{}
	byFrames := map[string]int{} // stacks that differ only in the allocator's frames are one
	for i := range evs {
		e := &evs[i]
		stk := -1
		if e.npc > 0 {
			var ok bool
			if stk, ok = byPCs[e.pcs]; !ok {
				fs := engineFrames(e.pcs[:e.npc])
				k := fmt.Sprint(fs)
				if stk, ok = byFrames[k]; !ok {
					stk = len(d.Stacks)
					byFrames[k] = stk
					d.Stacks = append(d.Stacks, fs)
				}
				byPCs[e.pcs] = stk
			}
		}
		d.Events[i] = memmap.Event{Seq: recorded - uint64(len(evs)-i), Time: time.Duration(e.t), Kind: eventKinds[e.kind], Addr: e.addr, Size: e.size,
			State: eventStates[e.state], InUse: e.inUse, Reserved: e.reserved, Detail: e.detail, Stack: stk}
	}
	return d
}

// allocPkg prefixes the functions of package alloc itself (not its
// subpackages, nor its tests'), which an event's stack leaves out.
const allocPkg = "github.com/capalloc/capalloc/alloc."

// engineFrames symbolizes a stack, inlined calls included
// (physicalFrames, pprof.go), from the first frame outside package alloc.
func engineFrames(pcs []uintptr) []memmap.Frame {
	var out []memmap.Frame
	for _, fs := range physicalFrames(pcs) {
		for _, f := range fs {
			if len(out) == 0 && strings.HasPrefix(f.Function, allocPkg) {
				continue
			}
			out = append(out, memmap.Frame{Function: f.Function, File: f.File, Line: f.Line})
		}
	}
	return slices.Clip(out)
}

// dumpHistoryLocked writes the history to Options.HistoryFile at an
// out-of-memory error, whole or not at all (a temporary file renamed):
// synchronously, so a process that dies of the error still leaves it.
// Caller holds a.mu, so the file shows the moment of the error; a failure
// to write it is logged, not added to the error.
func dumpHistoryLocked(a *Allocator) {
	h := a.stats.hist
	if h == nil || h.file == "" {
		return
	}
	err := writeFileAtomic(h.file, a.WriteHistory)
	if err != nil {
		a.opts.logger().Warn("capalloc: writing the allocation history at out-of-memory", "file", h.file, "err", err)
	}
}

func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
