package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
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
	return func(t testing.TB) alloc.Driver {
		t.Helper()
		d, err := c.Open(context.Background())
		require.NoError(t, err, "opening backend %s", c)
		return d
	}
}

// Lookup returns the Factory for one backend, given in the config-string
// form of a single choice ("cpu", "cpu:memory_limit=1GiB", "plugin:cpu"),
// after opening it once to prove it is available. An unknown name, or a
// backend whose library or device is missing, is an error wrapping
// alloc.ErrBackendUnavailable that says why and lists the registered names.
func Lookup(name string) (Factory, error) {
	cfg, err := backends.ParseConfig(name)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	if len(cfg) != 1 {
		return nil, fmt.Errorf("conformance: %w: %q is a chain; the suite runs one backend", backends.ErrInvalidConfig, name)
	}
	if err := tryOpen(cfg[0]); err != nil {
		return nil, fmt.Errorf("conformance: backend %q (registered: %s): %w", name, strings.Join(backends.Names(), ", "), err)
	}
	return factoryOf(cfg[0]), nil
}

// tryOpen opens and closes a backend once.
func tryOpen(c backends.Choice) error {
	d, err := c.Open(context.Background())
	if err != nil {
		if !errors.Is(err, alloc.ErrBackendUnavailable) {
			err = fmt.Errorf("%w: %w", alloc.ErrBackendUnavailable, err)
		}
		return err
	}
	return d.Close()
}

// defaultRun lists what a run without -backend covers: every registered
// backend, and each through every registered scheme ("plugin:cpu") for the
// backends named in schemeTargets.
func defaultRun() []string {
	names := backends.Names()
	for _, s := range backends.Schemes() {
		for _, n := range backends.Names() {
			if slices.Contains(schemeTargets, n) {
				names = append(names, s+":"+n)
			}
		}
	}
	return names
}

// schemeTargets are the backends a default run also runs out of process:
// the CPU backend always works, so plugin:cpu proves the plugin layer on
// every machine without doubling the GPU time.
var schemeTargets = []string{"cpu"}

// available lists the backends a default run covers that open on this
// machine, and for every other backend (registered but unavailable, or
// planned but not linked into this binary) the reason it is left out.
func available() (names []string, skipped map[string]error) {
	skipped = map[string]error{}
	for _, n := range defaultRun() {
		if err := tryOpen(backends.Choice{Name: n}); err != nil {
			skipped[n] = err
			continue
		}
		names = append(names, n)
	}
	for _, n := range planned {
		if !slices.Contains(backends.Names(), n) {
			skipped[n] = fmt.Errorf("%w: %q is not registered in this binary (its package is not built or not imported)", alloc.ErrBackendUnavailable, n)
		}
	}
	return names, skipped
}
