package step

import (
	"slices"
	"sync"
)

// Registry holds the names of operations known to be non-capturable (a
// cuDNN algorithm search, a producer that reads a Go slice, anything
// capprobe reported as refused), so an engine can ask whether an
// operation belongs in the captured region before it captures. It is safe
// for concurrent use; the zero value is empty and ready.
type Registry struct {
	mu    sync.RWMutex
	names map[string]struct{}
}

// Default is the registry of the package-level functions and of every
// Step whose Config.Registry is nil.
var Default = &Registry{}

// Add records names as non-capturable. Empty names are ignored.
func (r *Registry) Add(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names == nil {
		r.names = map[string]struct{}{}
	}
	for _, n := range names {
		if n != "" {
			r.names[n] = struct{}{}
		}
	}
}

// Remove forgets names (an operation that became capturable).
func (r *Registry) Remove(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		delete(r.names, n)
	}
}

// Contains reports whether name was recorded as non-capturable.
func (r *Registry) Contains(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	_, ok := r.names[name]
	return ok
}

// Names lists the recorded names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.names))
	for n := range r.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// NonCapturable records names in the Default registry.
func NonCapturable(names ...string) { Default.Add(names...) }

// IsNonCapturable reports whether name is in the Default registry.
func IsNonCapturable(name string) bool { return Default.Contains(name) }
