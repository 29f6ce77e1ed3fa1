// Package backends is the registry of allocator backends, in the
// database/sql style: each backend package registers an opener in its init,
// and programs select one by name.
package backends

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/capalloc/capalloc/alloc"
)

// Opener opens a backend's driver. A missing library or device is an error
// wrapping alloc.ErrBackendUnavailable that says what was searched.
type Opener func() (alloc.Driver, error)

var (
	mu      sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes a backend available by name. It panics on a duplicate or
// empty name or a nil opener, as those are programming errors at init time.
func Register(name string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || open == nil {
		panic("backends: Register needs a name and an opener")
	}
	if _, dup := openers[name]; dup {
		panic("backends: Register called twice for " + name)
	}
	openers[name] = open
}

// Names lists the registered backends, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(openers))
	for n := range openers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the opener registered under name; an unknown name is an
// error wrapping alloc.ErrBackendUnavailable that lists the known ones.
func Lookup(name string) (Opener, error) {
	mu.RLock()
	open, ok := openers[name]
	mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: unknown backend %q (known: %s)", alloc.ErrBackendUnavailable, name, strings.Join(Names(), ", "))
	}
	return open, nil
}

// OpenDriver looks name up and opens it.
func OpenDriver(name string) (alloc.Driver, error) {
	open, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return open()
}
