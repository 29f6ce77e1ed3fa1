package conformance

import (
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

// FactoryOf adapts a registry opener to a Factory.
func FactoryOf(open backends.Opener) Factory {
	return func(t testing.TB) alloc.Driver {
		t.Helper()
		d, err := open()
		require.NoError(t, err, "opening the backend")
		return d
	}
}

// Lookup returns the Factory for a registered backend after opening it once
// to prove it is available. An unknown name, or a backend whose library or
// device is missing, is an error wrapping alloc.ErrBackendUnavailable that
// says why and lists the registered names.
func Lookup(name string) (Factory, error) {
	open, err := backends.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	if err := probe(open); err != nil {
		return nil, fmt.Errorf("conformance: backend %q (registered: %s): %w", name, strings.Join(backends.Names(), ", "), err)
	}
	return FactoryOf(open), nil
}

// probe opens and closes a backend once.
func probe(open backends.Opener) error {
	d, err := open()
	if err != nil {
		if !errors.Is(err, alloc.ErrBackendUnavailable) {
			err = fmt.Errorf("%w: %w", alloc.ErrBackendUnavailable, err)
		}
		return err
	}
	return d.Close()
}

// Available lists the registered backends that open on this machine, and
// for every other backend (registered but unavailable, or planned but not
// linked into this binary) the reason it is left out.
func Available() (names []string, skipped map[string]error) {
	skipped = map[string]error{}
	for _, n := range backends.Names() {
		open, err := backends.Lookup(n)
		if err == nil {
			err = probe(open)
		}
		if err != nil {
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
