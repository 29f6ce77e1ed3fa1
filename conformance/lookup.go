package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
)

// Backends come from the backends registry: a test binary or tool links the
// ones it wants (import _ "github.com/capalloc/capalloc/cpu") and selects
// them here by name. This package imports no backend itself, so backend
// packages can use it in their tests without an import cycle.

// planned are backends the design names that may not be linked into a given
// binary; a default run says why each was not run.
var planned = []string{"cpu", "cuda", "hip"}

// factoryOf adapts one backend choice (a registered name or
// scheme:target, with options) to a Factory.
func factoryOf(c backends.Choice) Factory {
	return func(t testing.TB) driver.Driver {
		t.Helper()
		d, err := c.Open(context.Background())
		require.NoError(t, err, "opening backend %s", c)
		return d
	}
}

// Lookup returns the Factory for a backend given in config-string form:
// one choice ("cpu", "cpu:memory_limit=1GiB", "plugin:cpu") or a fallback
// chain ("hip;cpu": the first that opens, as backends.OpenString chooses),
// after opening it once to prove it is available. An unknown name, or a
// backend whose library or device is missing, is an error wrapping
// driver.ErrBackendUnavailable that says why and lists the registered names.
func Lookup(name string) (Factory, error) {
	f, _, err := lookupChain(name)
	return f, err
}

// lookupChain is Lookup that also says which choice won and why earlier
// ones were skipped.
func lookupChain(name string) (Factory, *backends.Opened, error) {
	cfg, err := backends.ParseConfig(name)
	if err != nil {
		return nil, nil, fmt.Errorf("conformance: %w", err)
	}
	if len(cfg) == 1 {
		if err := cfg[0].Available(context.Background()); err != nil {
			return nil, nil, fmt.Errorf("conformance: backend %q (registered: %s): %w", name, strings.Join(backends.Names(), ", "), err)
		}
		return factoryOf(cfg[0]), &backends.Opened{Choice: cfg[0]}, nil
	}
	o, err := cfg.Open(context.Background())
	if err != nil {
		return nil, nil, fmt.Errorf("conformance: chain %q (registered: %s): %w", name, strings.Join(backends.Names(), ", "), err)
	}
	if err := o.Driver.Close(); err != nil {
		return nil, nil, err
	}
	return factoryOf(o.Choice), o, nil
}

// schemeTargets are the backends a default run also runs out of process:
// the CPU backend always works, so plugin:cpu proves the plugin layer on
// every machine without doubling the GPU time.
var schemeTargets = []string{"cpu"}

// available lists the backends a default run covers (backends.Survey:
// every registered backend, and schemeTargets through every scheme) that
// open on this machine, and for every other backend (registered but
// unavailable, or planned but not linked into this binary) the reason it
// is left out.
func available() (names []string, skipped map[string]error) {
	skipped = map[string]error{}
	for _, av := range backends.Survey(context.Background(), schemeTargets...) {
		if av.Err != nil {
			skipped[av.Name] = av.Err
			continue
		}
		names = append(names, av.Name)
	}
	for _, n := range planned {
		if !slices.Contains(backends.Names(), n) {
			skipped[n] = fmt.Errorf("%w: %q is not registered in this binary (its package is not built or not imported)", driver.ErrBackendUnavailable, n)
		}
	}
	return names, skipped
}
