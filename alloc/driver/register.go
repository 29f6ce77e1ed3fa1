package driver

import (
	"context"
	"sort"
	"strings"
	"sync"
)

// The registry of backends, in the database/sql style: each backend
// package registers an Opener in its init (cpu registers "cpu"), and
// package backends opens them by name, with options, from Go or from a
// config string. It lives here, in the contract, because a driver package
// imports only this package and those below it (docs/design.md,
// "Layers"): the registry is what a driver and package backends share.

// Opener opens a backend's driver with its options and the memory
// suppliers a program handed it (zero Memory: the backend's own). It
// rejects options it does not know (Options.Check) with ErrInvalidConfig;
// a missing library or device is an error wrapping ErrBackendUnavailable
// that says what was searched.
type Opener func(ctx context.Context, opts Options, mem Memory) (Driver, error)

// SchemeOpener opens "scheme:target" names, such as "plugin:cpu": target
// is what follows the scheme.
type SchemeOpener func(ctx context.Context, target string, opts Options) (Driver, error)

// ReservedName is the one plain name Register and RegisterScheme refuse:
// in a fallback chain it is a flag, not a backend (backends' strict mode).
const ReservedName = "strict"

var registry = struct {
	sync.RWMutex
	openers map[string]Opener
	schemes map[string]SchemeOpener
}{openers: map[string]Opener{}, schemes: map[string]SchemeOpener{}}

// Register makes a backend available by name. It panics on a duplicate or
// invalid name (empty, holding one of ": ; , =" or a space, or
// ReservedName) or a nil Opener, as those are programming errors at init.
func Register(name string, o Opener) { put(registry.openers, "Register", name, o, o == nil) }

// RegisterScheme makes "scheme:target" names available ("plugin" is
// registered by backends/plugin). It panics like Register.
func RegisterScheme(scheme string, o SchemeOpener) {
	put(registry.schemes, "RegisterScheme", scheme, o, o == nil)
}

func put[V any](m map[string]V, fn, name string, v V, isNil bool) {
	registry.Lock()
	defer registry.Unlock()
	if name == "" || strings.ContainsAny(name, ":;,= ") || name == ReservedName || isNil {
		panic("driver: " + fn + " needs a plain name (no : ; , = or space, not " + ReservedName + ") and a non-nil opener")
	}
	if _, dup := m[name]; dup {
		panic("driver: " + fn + " called twice for " + name)
	}
	m[name] = v
}

// Lookup returns the Opener registered under name.
func Lookup(name string) (Opener, bool) {
	registry.RLock()
	defer registry.RUnlock()
	o, ok := registry.openers[name]
	return o, ok
}

// LookupScheme returns the SchemeOpener registered under scheme.
func LookupScheme(scheme string) (SchemeOpener, bool) {
	registry.RLock()
	defer registry.RUnlock()
	o, ok := registry.schemes[scheme]
	return o, ok
}

// Registered lists the registered backend names, sorted.
func Registered() []string {
	registry.RLock()
	defer registry.RUnlock()
	return sortedKeys(registry.openers)
}

// RegisteredSchemes lists the registered schemes, sorted.
func RegisteredSchemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	return sortedKeys(registry.schemes)
}

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
