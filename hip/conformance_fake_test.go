package hip

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/conformance"
)

// The whole conformance suite at 5.6.0, the oldest runtime the driver
// captures with (internal/gpurt runs it for both vendors at the fakes'
// default versions, HIP 6.1): the fake then takes
// hipIpcMemLazyEnablePeerAccess as 0 and reports no pool support by
// default (the driver warns and goes on).
func TestConformanceOnFakeRuntime56(t *testing.T) {
	fake.Lib(t)
	t.Setenv("FAKE_HIP_VERSION", "50600000")
	conformance.Run(t, func(t testing.TB) alloc.Driver {
		t.Helper()
		d, err := New(Options{})
		if err != nil {
			t.Fatalf("open on the fake runtime 5.6: %v", err)
		}
		if d.rt.Version != 50600000 {
			t.Fatalf("runtime version %d, want 50600000", d.rt.Version)
		}
		return d
	})
}
