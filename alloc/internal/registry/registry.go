// Package registry gives the views under alloc (alloc/allocview,
// alloc/allocprom) the process's open allocators, their histories and the
// profile rate, which package alloc keeps out of the engine's API: alloc's
// init installs its Source in internal/allochooks, and the functions here
// call it.
package registry

import (
	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// Source is what package alloc installs in allochooks.Registry
// (alloc/registry.go, registrySource; alloc's tests assert that it
// implements Source).
type Source interface {
	Allocators() []*alloc.Allocator
	Lookup(name string) *alloc.Allocator
	Name(a *alloc.Allocator) string
	Usage(a *alloc.Allocator) (memmap.Snapshot, error)
	ProfileRate() int
	History(a *alloc.Allocator, maxEvents int) memmap.History
}

// source is package alloc's Source (linked by this package's import of
// it).
func source() Source { return allochooks.Registry.(Source) }

// Allocators returns the open allocators of the process, sorted by name.
func Allocators() []*alloc.Allocator { return source().Allocators() }

// Lookup returns the open allocator named name, or nil.
func Lookup(name string) *alloc.Allocator { return source().Lookup(name) }

// ProfileRate returns the device memory profile's sampling rate
// (alloc.SetProfileRate's).
func ProfileRate() int { return source().ProfileRate() }

// Name is a's name (alloc.Options.Name, or the default New gave it).
func Name(a *alloc.Allocator) string { return source().Name(a) }

// Usage is a's Snapshot without Segments and Graphs: its memory by block
// state and graph pool, and its counters, of one moment, without listing
// the blocks (what a metrics scrape reads). It fails with
// alloc.ErrClosed once a is closed.
func Usage(a *alloc.Allocator) (memmap.Snapshot, error) {
	return source().Usage(a)
}

// History is a's newest maxEvents events, oldest first (every event
// kept when maxEvents < 0): alloc.Allocator.WriteHistory's history,
// bounded. The history's lock, which a's allocations and frees take, is
// held only to copy those events (256 B each); Truncated counts the kept
// events left out.
func History(a *alloc.Allocator, maxEvents int) memmap.History {
	return source().History(a, maxEvents)
}
