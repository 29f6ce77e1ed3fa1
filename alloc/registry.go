package alloc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/internal/allochooks"
)

// The registry of open allocators, by name, so that the process-wide views
// (WriteProfile, alloc/allocview, alloc/allocprom, which reach it through
// alloc/internal/registry) find every one without the engine handing them
// over. New reserves the name first
// (so a name in use is refused before any driver call) and publishes the
// allocator only once it is fully built: a reader walking allocators()
// never meets one half made. Close removes it; a reader that listed it
// before may still call it, and its readers (Stats, Snapshot ...) stay
// safe on a closed allocator.
var registry = struct {
	sync.Mutex
	byName   map[string]*Allocator // published
	building map[string]*Allocator // reserved by New, not yet published
	seq      map[string]int        // last number given to a default name, by backend
}{byName: map[string]*Allocator{}, building: map[string]*Allocator{}, seq: map[string]int{}}

// nameInUse reports whether name is reserved or published. Caller holds the
// registry's lock.
func nameInUse(name string) bool {
	return registry.byName[name] != nil || registry.building[name] != nil
}

// register names a (the default name when opts.Name is empty) and
// reserves the name; publish lists a. A name in use, or one that is not
// UTF-8 (views and metrics label by name, and need text), is refused with
// ErrInvalidValue.
func register(a *Allocator, name string) error {
	if !utf8.ValidString(name) {
		return wrapf(ErrInvalidValue, "allocator name %q is not valid UTF-8", name)
	}
	registry.Lock()
	defer registry.Unlock()
	if name == "" {
		backend := strings.ToValidUTF8(a.backend, "\uFFFD") // a driver's name is its own
		for name == "" || nameInUse(name) {
			registry.seq[a.backend]++
			name = fmt.Sprintf("%s-%d", backend, registry.seq[a.backend])
		}
	} else if nameInUse(name) {
		return wrapf(ErrInvalidValue, "allocator name %q is in use by an open allocator", name)
	}
	a.name = name
	registry.building[name] = a
	return nil
}

// publish lists a, registered and fully built, in allocators and lookup.
func publish(a *Allocator) {
	registry.Lock()
	delete(registry.building, a.name)
	registry.byName[a.name] = a
	registry.Unlock()
}

func unregister(a *Allocator) {
	registry.Lock()
	defer registry.Unlock()
	if registry.byName[a.name] == a {
		delete(registry.byName, a.name)
	}
	if registry.building[a.name] == a {
		delete(registry.building, a.name)
	}
}

// allocators returns the open allocators of the process, sorted by name.
func allocators() []*Allocator {
	registry.Lock()
	out := make([]*Allocator, 0, len(registry.byName))
	for _, a := range registry.byName {
		out = append(out, a)
	}
	registry.Unlock()
	slices.SortFunc(out, func(x, y *Allocator) int { return cmp.Compare(x.name, y.name) })
	return out
}

// lookup returns the open allocator named name, or nil.
func lookup(name string) *Allocator {
	registry.Lock()
	defer registry.Unlock()
	return registry.byName[name]
}

// registrySource is the registry as the views read it, installed in
// internal/allochooks and reached through alloc/internal/registry (whose
// Source interface it implements; alloc's tests assert it).
type registrySource struct{}

func init() { allochooks.Registry = registrySource{} }

func (registrySource) Allocators() []*Allocator      { return allocators() }
func (registrySource) Lookup(name string) *Allocator { return lookup(name) }
func (registrySource) Name(a *Allocator) string      { return a.name }
func (registrySource) ProfileRate() int              { return currentProfileRate() }
func (registrySource) Usage(a *Allocator) (memmap.Snapshot, error) {
	return usage(a)
}

// History is the bounded window of a's history the views read
// (history_write.go, readHistory).
func (registrySource) History(a *Allocator, maxEvents int) memmap.History {
	return readHistory(a, maxEvents)
}
