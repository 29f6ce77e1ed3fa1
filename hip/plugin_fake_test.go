package hip

import (
	"os"
	"testing"

	"github.com/capalloc/capalloc/backends/plugin"
	"github.com/capalloc/capalloc/conformance"
)

// TestMain lets this test binary serve as its own plugin process, so
// plugin:hip runs this package's driver in a child over the fake runtime.
func TestMain(m *testing.M) {
	plugin.ServeIfChild()
	os.Exit(m.Run())
}

// The whole conformance suite through plugin mode: the hip driver in a
// child process over the fake runtime (found through CAPALLOC_HIP_LIB,
// inherited); pinned host buffers are the plugin's shared memory,
// registered with hipHostRegister in the child.
func TestPluginConformanceOnFakeRuntime(t *testing.T) {
	fakeLib(t)
	open, err := conformance.Lookup("plugin:hip")
	if err != nil {
		t.Fatalf("plugin:hip over the fake runtime: %v", err)
	}
	conformance.Run(t, open)
}
