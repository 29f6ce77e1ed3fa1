package alloc

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// The registry of open allocators, by name, so that the process-wide views
// (WriteProfile, Allocators, alloc/allocview, alloc/allocprom) find every
// one without the engine handing them over. New registers, Close removes.
var registry = struct {
	sync.Mutex
	byName map[string]*Allocator
	seq    map[string]int // last number given to a default name, by backend
}{byName: map[string]*Allocator{}, seq: map[string]int{}}

// register names a (the default name when opts.Name is empty) and records
// it. A name in use is refused with ErrInvalidValue.
func register(a *Allocator, name string) error {
	registry.Lock()
	defer registry.Unlock()
	if name == "" {
		for name == "" || registry.byName[name] != nil {
			registry.seq[a.backend]++
			name = fmt.Sprintf("%s-%d", a.backend, registry.seq[a.backend])
		}
	} else if registry.byName[name] != nil {
		return wrapf(ErrInvalidValue, "allocator name %q is in use by an open allocator", name)
	}
	a.name = name
	registry.byName[name] = a
	return nil
}

func unregister(a *Allocator) {
	registry.Lock()
	defer registry.Unlock()
	if registry.byName[a.name] == a {
		delete(registry.byName, a.name)
	}
}

// Allocators returns the open allocators of the process, sorted by name.
func Allocators() []*Allocator {
	registry.Lock()
	out := make([]*Allocator, 0, len(registry.byName))
	for _, a := range registry.byName {
		out = append(out, a)
	}
	registry.Unlock()
	slices.SortFunc(out, func(x, y *Allocator) int { return cmp.Compare(x.name, y.name) })
	return out
}

// Lookup returns the open allocator named name, or nil.
func Lookup(name string) *Allocator {
	registry.Lock()
	defer registry.Unlock()
	return registry.byName[name]
}

// Name is the allocator's name (Options.Name, or the default given).
func (a *Allocator) Name() string { return a.name }
