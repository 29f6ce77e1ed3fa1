package conformance

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin" // registers the "plugin" scheme
	_ "github.com/capalloc/capalloc/cpu"           // registers "cpu"
	_ "github.com/capalloc/capalloc/cuda"          // registers "cuda"
	_ "github.com/capalloc/capalloc/hip"           // registers "hip"
)

// TestMain makes the test binary its own plugin binary: plugin:cpu runs the
// cpu backend in a re-executed copy of this binary, so the default run
// covers plugin mode with no separately built capalloc-plugin.
func TestMain(m *testing.M) {
	plugin.ServeIfChild()
	rankProcessIfChild()
	os.Exit(m.Run())
}

var backendFlag = flag.String("backend", "", "backend to run the suite on (default $CAPALLOC_BACKEND; empty: every available one)")

// selected is the backend asked for with -backend or CAPALLOC_BACKEND.
func selected() string {
	if *backendFlag != "" {
		return *backendFlag
	}
	return os.Getenv("CAPALLOC_BACKEND")
}

// TestConformance runs the suite on the selected backend, or on every
// available one. Asking for a backend that cannot run fails, with the
// reason. In the default run a backend that cannot run here is a skipped
// subtest whose reason `go test -v` prints (`go run ./cmd/capprobe
// -backends` lists the same without running the suite).
func TestConformance(t *testing.T) {
	if name := selected(); name != "" {
		open, opened, err := lookupChain(name)
		if err != nil {
			t.Fatalf("backend %q selected but not usable: %v", name, err)
		}
		if len(opened.Skipped) > 0 {
			t.Logf("%s", opened.Report())
		}
		t.Run(opened.Choice.String(), func(t *testing.T) {
			Run(t, open)
			t.Run("ExpandableSegments", func(t *testing.T) { RunExpandable(t, open) })
		})
		return
	}
	names, skipped := available()
	require.NotEmpty(t, names, "no backend available on this machine")
	for _, n := range names {
		open, err := Lookup(n)
		require.NoError(t, err)
		t.Run(n, func(t *testing.T) {
			Run(t, open)
			t.Run("ExpandableSegments", func(t *testing.T) { RunExpandable(t, open) })
		})
	}
	for _, n := range slices.Sorted(maps.Keys(skipped)) {
		t.Run(n, func(t *testing.T) { t.Skipf("backend %s not run: %v", n, skipped[n]) })
	}
}

// A fallback chain selects the first backend that opens, as
// backends.OpenString does: "no-such;cpu" runs cpu.
func TestLookupChainFallsBack(t *testing.T) {
	_, opened, err := lookupChain("no-such-backend;cpu")
	require.NoError(t, err)
	require.Equal(t, "cpu", opened.Choice.Name)
	require.Len(t, opened.Skipped, 1)
	_, _, err = lookupChain("no-such-backend;also-missing")
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
}

func TestLookupUnknownBackendFails(t *testing.T) {
	_, err := Lookup("no-such-backend")
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	for _, n := range backends.Names() {
		require.Contains(t, err.Error(), n, "the error lists the known backends")
	}
}

func TestLookupUnavailableBackendFails(t *testing.T) {
	// A registered backend whose library is missing.
	if !slices.Contains(backends.Names(), "conformance-test-missing") { // -count=N
		driver.Register("conformance-test-missing", func(context.Context, driver.Options, driver.Memory) (driver.Driver, error) {
			return nil, fmt.Errorf("%w: libmissing.so not found", driver.ErrBackendUnavailable)
		})
	}
	_, err := Lookup("conformance-test-missing")
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	_, skipped := available()
	require.ErrorIs(t, skipped["conformance-test-missing"], driver.ErrBackendUnavailable)
}
