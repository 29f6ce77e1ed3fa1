package gpurt_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/conformance"
)

// The whole conformance suite, on each driver over its fake runtime (HIP
// 6.1 by default): it proves the driver's plumbing (handles, pointers,
// modes, statuses, error mapping, threads) end to end. It says nothing
// about real GPU timing or the runtimes' own behavior, which the GPU run
// of `go test ./conformance -backend=cuda` (or hip) covers.
func TestConformanceOnFakeRuntime(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		fakeLib(t, v)
		conformance.Run(t, func(t testing.TB) alloc.Driver {
			t.Helper()
			d, err := v.open(opts{})
			if err != nil {
				t.Fatalf("open on the fake runtime: %v", err)
			}
			return d
		})
	})
}

// The whole conformance suite through plugin mode: the driver in a child
// process (this test binary: TestMain) over the fake runtime, which the
// child finds through the vendor's library variable, inherited. Pinned
// host buffers are the plugin's shared memory, registered with the
// host-register call in the child: before that, every HostAlloc through
// plugin:cuda failed (seen on an H100).
func TestPluginConformanceOnFakeRuntime(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		fakeLib(t, v)
		open, err := conformance.Lookup("plugin:" + v.name)
		if err != nil {
			t.Fatalf("plugin:%s over the fake runtime: %v", v.name, err)
		}
		conformance.Run(t, open)
	})
}
