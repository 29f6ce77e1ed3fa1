package hip

import (
	"os"
	"slices"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/conformance"
)

// The whole conformance suite at 5.6.0, the oldest runtime the driver
// captures with (internal/gpurt runs it for both vendors at the fakes'
// default versions, HIP 6.1): the fake then takes
// hipIpcMemLazyEnablePeerAccess as 0 and reports no pool support by
// default (the driver warns and goes on). The device heap's collectives,
// whose kernels the fake runs as host threads, are the same code at every
// version: without $CAPALLOC_TEST_FULL (.ci/run sets it) they run at the
// default version only, to keep `go test ./...` within its time budget.
func TestConformanceOnFakeRuntime56(t *testing.T) {
	fake.Lib(t)
	t.Setenv("FAKE_HIP_VERSION", "50600000")
	groups := conformance.Groups()
	if os.Getenv("CAPALLOC_TEST_FULL") == "" {
		groups = slices.DeleteFunc(groups, func(g string) bool { return g == "Collectives" })
		t.Log("the Collectives group runs at 5.6 with $CAPALLOC_TEST_FULL=1 only (as in .ci/run)")
	}
	conformance.RunGroups(t, func(t testing.TB) driver.Driver {
		t.Helper()
		// The fake implements the documented rules (docs/capture-safety.md).
		d, err := New(Options{CaptureSafety: driver.SafetyDocumented})
		if err != nil {
			t.Fatalf("open on the fake runtime 5.6: %v", err)
		}
		if d.rt.Version != 50600000 {
			t.Fatalf("runtime version %d, want 50600000", d.rt.Version)
		}
		return d
	}, groups...)
}
