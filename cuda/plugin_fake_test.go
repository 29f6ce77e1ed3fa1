package cuda

import (
	"os"
	"testing"

	"github.com/capalloc/capalloc/backends/plugin"
	"github.com/capalloc/capalloc/conformance"
)

// TestMain lets this test binary serve as its own plugin process, so
// plugin:cuda runs this package's driver in a child over the fake runtime.
func TestMain(m *testing.M) {
	plugin.ServeIfChild()
	os.Exit(m.Run())
}

// The whole conformance suite through plugin mode, the cuda driver in a
// child process over the fake runtime (which the child finds through
// CAPALLOC_CUDA_LIB, inherited). Pinned host buffers are the plugin's
// shared memory, registered with cudaHostRegister in the child: before
// that, every HostAlloc through plugin:cuda failed (seen on an H100).
func TestPluginConformanceOnFakeRuntime(t *testing.T) {
	fakeLib(t)
	open, err := conformance.Lookup("plugin:cuda")
	if err != nil {
		t.Fatalf("plugin:cuda over the fake runtime: %v", err)
	}
	conformance.Run(t, open)
}
