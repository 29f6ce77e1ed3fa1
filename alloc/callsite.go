package alloc

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
)

// nameCallSites sets the CallSite of every sampled block the walk listed,
// each distinct stack symbolized once. A stack record's pcs never change
// once recorded, so this needs no lock.
func (w *memWalk) nameCallSites() {
	names := map[*stackRecord]string{}
	var last *stackRecord // neighbours often share a stack: no map lookup then
	var name string
	for i, stk := range w.stacks {
		if stk == nil {
			continue
		}
		if stk != last {
			var ok bool
			if name, ok = names[stk]; !ok {
				name = callSite(stk.pcs)
				names[stk] = name
			}
			last = stk
		}
		w.blocks[i].CallSite = name
	}
}

// callSite names the first frame of pcs outside the allocator's API, the
// leaf the profile shows (pprof.go's symbolizer.stack trims the same
// frames), as function, file base name and line. Inlined calls count as
// frames.
func callSite(pcs []uintptr) string {
	for _, pc := range pcs {
		it := runtime.CallersFrames([]uintptr{pc})
		for {
			f, more := it.Next()
			if !strings.HasPrefix(f.Function, allocAPI) {
				return fmt.Sprintf("%s %s:%d", f.Function, filepath.Base(f.File), f.Line)
			}
			if !more {
				break
			}
		}
	}
	return ""
}
