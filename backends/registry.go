// Package backends is the registry of allocator backends, in the
// database/sql style: each backend package registers a factory in its init,
// and programs select one by name, with options, from Go or from a config
// string, as a fallback chain (see Open and ParseConfig).
package backends

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Factory opens a backend's driver with its options. It rejects options it
// does not know (Options.Check) with ErrInvalidConfig; a missing library or
// device is an error wrapping driver.ErrBackendUnavailable that says what was
// searched.
type Factory func(ctx context.Context, c Choice) (driver.Driver, error)

// SchemeFactory opens "scheme:target" choices, such as "plugin:cpu": target
// is what follows the scheme.
type SchemeFactory func(ctx context.Context, target string, opts Options) (driver.Driver, error)

// ErrUnknownBackend is a name no linked package registered. It matches
// driver.ErrBackendUnavailable, so a fallback chain moves past it (and says
// so); its message lists the registered names, the name a near miss likely
// meant, and the import that registers a backend of this module the binary
// does not link (names.go).
var ErrUnknownBackend = fmt.Errorf("%w: unknown backend", driver.ErrBackendUnavailable)

var (
	mu        sync.RWMutex
	factories = map[string]Factory{}
	schemes   = map[string]SchemeFactory{}
)

// Register makes a backend available by name. It panics on a duplicate or
// invalid name or a nil factory, as those are programming errors at init.
func Register(name string, f Factory) { put(factories, "Register", name, f, f == nil) }

// RegisterScheme makes "scheme:target" names available ("plugin" is
// registered by backends/plugin). It panics like Register.
func RegisterScheme(scheme string, f SchemeFactory) {
	put(schemes, "RegisterScheme", scheme, f, f == nil)
}

func put[V any](m map[string]V, fn, name string, f V, isNil bool) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || strings.ContainsAny(name, ":;,= ") || name == strictFlag || isNil {
		panic("backends: " + fn + " needs a plain name (no : ; , = or space, not " + strictFlag + ") and a non-nil factory")
	}
	if _, dup := m[name]; dup {
		panic("backends: " + fn + " called twice for " + name)
	}
	m[name] = f
}

// Names lists the registered backends, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	return sortedKeys(factories)
}

// Schemes lists the registered schemes, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	return sortedKeys(schemes)
}

func sortedKeys[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// lookup returns the factory registered under name. An unknown name is an
// error wrapping ErrUnknownBackend that lists the known ones.
func lookup(name string) (Factory, error) {
	mu.RLock()
	f, ok := factories[name]
	mu.RUnlock()
	if !ok {
		return nil, unknown(name)
	}
	return f, nil
}

// Open opens exactly this backend, a registered name or a scheme:target,
// with its options and memory suppliers.
func (c Choice) Open(ctx context.Context) (driver.Driver, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.Options == nil {
		c.Options = Options{}
	}
	if c.Name == strictFlag {
		return nil, fmt.Errorf("%w: %q is a flag of a fallback chain (strict mode), not a backend", ErrInvalidConfig, c.Name)
	}
	if scheme, target, ok := c.Scheme(); ok {
		mu.RLock()
		f, found := schemes[scheme]
		mu.RUnlock()
		if !found {
			return nil, unknown(c.Name)
		}
		return f(ctx, target, c.Options)
	}
	f, err := lookup(c.Name)
	if err != nil {
		return nil, err
	}
	return f(ctx, c)
}

// OpenDriver opens one backend given in the config-string form of a single
// choice ("cpu", "cuda:device=1", "plugin:cpu"), with no fallback.
func OpenDriver(ctx context.Context, s string) (driver.Driver, error) {
	cfg, err := ParseConfig(s)
	if err != nil {
		return nil, err
	}
	if len(cfg) != 1 {
		return nil, fmt.Errorf("%w: %q is a fallback chain; OpenDriver takes one backend (use Open)", ErrInvalidConfig, s)
	}
	return cfg[0].Open(ctx)
}
