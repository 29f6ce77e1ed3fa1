package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/conformance"
)

// The whole conformance suite, on this driver over the fake runtime: it
// proves the driver's plumbing (handles, pointers, modes, statuses, error
// mapping, threads) end to end. It says nothing about real GPU timing or
// CUDA's own behavior, which the GPU run of `go test ./conformance
// -backend=cuda` covers.
func TestConformanceOnFakeRuntime(t *testing.T) {
	fakeLib(t)
	conformance.Run(t, func(t testing.TB) alloc.Driver {
		t.Helper()
		d, err := New(Options{})
		if err != nil {
			t.Fatalf("open on the fake runtime: %v", err)
		}
		return d
	})
}
