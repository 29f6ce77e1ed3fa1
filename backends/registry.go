// Package backends opens allocator backends by name, in the database/sql
// style: each backend package registers an opener in its init
// (driver.Register, the registry a driver package can reach: drivers
// import alloc/driver, never this package), and programs select one by
// name, with options, from Go or from a config string, as a fallback chain
// (see Open and ParseConfig).
package backends

import (
	"context"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ErrUnknownBackend is a name no linked package registered. It matches
// driver.ErrBackendUnavailable, so a fallback chain moves past it (and says
// so); its message lists the registered names, the name a near miss likely
// meant, and the import that registers a backend of this module the binary
// does not link (names.go).
var ErrUnknownBackend = fmt.Errorf("%w: unknown backend", driver.ErrBackendUnavailable)

// Names lists the registered backends, sorted (driver.Registered).
func Names() []string { return driver.Registered() }

// Schemes lists the registered schemes, sorted
// (driver.RegisteredSchemes).
func Schemes() []string { return driver.RegisteredSchemes() }

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
		open, found := driver.LookupScheme(scheme)
		if !found {
			return nil, unknown(c.Name)
		}
		return open(ctx, target, c.Options)
	}
	open, found := driver.Lookup(c.Name)
	if !found {
		return nil, unknown(c.Name)
	}
	return open(ctx, c.Options, c.Memory)
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
