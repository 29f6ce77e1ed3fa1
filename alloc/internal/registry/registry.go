// Package registry gives the views under alloc (alloc/allocview,
// alloc/allocprom) the process's open allocators and its profile rate,
// which package alloc keeps out of the engine's API: it reads the hooks
// alloc's init sets (internal/allochooks) and types what they return.
package registry

import (
	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// Allocators returns the open allocators of the process, sorted by name.
func Allocators() []*alloc.Allocator {
	as := allochooks.Allocators()
	out := make([]*alloc.Allocator, len(as))
	for i, a := range as {
		out[i] = a.(*alloc.Allocator)
	}
	return out
}

// Lookup returns the open allocator named name, or nil.
func Lookup(name string) *alloc.Allocator {
	a, _ := allochooks.Lookup(name).(*alloc.Allocator)
	return a
}

// ProfileRate returns the device memory profile's sampling rate
// (alloc.SetProfileRate's).
func ProfileRate() int { return allochooks.ProfileRate() }

// Name is a's name (alloc.Options.Name, or the default New gave it).
func Name(a *alloc.Allocator) string { return allochooks.Name(a) }

// Usage is a's Snapshot without Segments and Graphs: its memory by block
// state and graph pool, and its counters, of one moment, without listing
// the blocks (what a metrics scrape reads). It fails with
// alloc.ErrClosed once a is closed.
func Usage(a *alloc.Allocator) (memmap.Snapshot, error) {
	s, err := allochooks.Usage(a)
	if err != nil {
		return memmap.Snapshot{}, err
	}
	return s.(memmap.Snapshot), nil
}

// History is a's newest maxEvents events, oldest first (every event
// kept when maxEvents < 0): alloc.Allocator.WriteHistory's history,
// bounded. The history's lock, which a's allocations and frees take, is
// held only to copy those events (256 B each); Truncated counts the kept
// events left out.
func History(a *alloc.Allocator, maxEvents int) memmap.History {
	return allochooks.History(a, maxEvents).(memmap.History)
}
