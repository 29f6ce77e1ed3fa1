package gpurt_test

import (
	"os"
	"slices"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
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
		conformance.Run(t, fakeFactory(v))
	})
}

// fakeFactory opens v's driver over its fake runtime.
func fakeFactory(v *vendorCase) conformance.Factory {
	return func(t testing.TB) driver.Driver {
		t.Helper()
		d, err := v.open(opts{})
		if err != nil {
			t.Fatalf("open on the fake runtime: %v", err)
		}
		return d
	}
}

// The allocator groups again with expandable segments on
// (conformance.RunExpandable), on each driver over its fake runtime: they
// skip, saying so, for a driver without driver.VirtualMemory.
func TestExpandableConformanceOnFakeRuntime(t *testing.T) {
	forEach(t, func(t *testing.T, v *vendorCase) {
		fakeLib(t, v)
		conformance.RunExpandable(t, fakeFactory(v))
	})
}

// The conformance suite through plugin mode: the driver in a child
// process (this test binary: TestMain) over the fake runtime, which the
// child finds through the vendor's library variable, inherited. Pinned
// host buffers are the plugin's shared memory, registered with the
// host-register call in the child: before that, every HostAlloc through
// plugin:cuda failed (seen on an H100).
//
// With $CAPALLOC_TEST_FULL set (.ci/run sets it) it runs the whole suite.
// Otherwise, to keep `go test ./...` within its time budget on a 2-core
// machine, it leaves out the heaviest groups (pluginOnlyInFull),
// whose plugin side every run covers on plugin:cpu (package conformance)
// and whose driver side on the fakes directly (TestConformanceOnFakeRuntime).
func TestPluginConformanceOnFakeRuntime(t *testing.T) {
	groups := conformance.Groups()
	if os.Getenv(fullEnv) == "" {
		groups = slices.DeleteFunc(groups, func(g string) bool { return slices.Contains(pluginOnlyInFull, g) })
		t.Logf("groups %v run with $%s=1 only (as in .ci/run)", pluginOnlyInFull, fullEnv)
	}
	forEach(t, func(t *testing.T, v *vendorCase) {
		fakeLib(t, v)
		open, err := conformance.Lookup("plugin:" + v.name)
		if err != nil {
			t.Fatalf("plugin:%s over the fake runtime: %v", v.name, err)
		}
		conformance.RunGroups(t, open, groups...)
	})
}

// fullEnv asks for the heaviest test matrices in full.
const fullEnv = "CAPALLOC_TEST_FULL"

// pluginOnlyInFull are the conformance groups TestPluginConformanceOnFakeRuntime
// runs only in full: about 10 s of its 17 s per vendor.
var pluginOnlyInFull = []string{"TruthTable", "Watchdog", "Concurrency"}
