package cuda

import (
	"testing"
)

// On a real GPU: two processes, each a rank on device 0, exchange their
// heaps' IPC handles through files and open each other's
// (cudaIpcOpenMemHandle across processes); each checks the device peer
// table, reads both ranks' bytes through copies captured once and replayed
// after the peers wrote fresh ones, and closes (every handle it opened is
// closed, everything it allocated freed). Ranks as goroutines in one
// process are the conformance cell Collectives/device_heap (go test
// ./conformance -backend=cuda). Skipped, with the reason, where no CUDA
// device opens.
func TestGPUDeviceHeap(t *testing.T) {
	if asRank(t, devHeapChildEnv, devHeapChild) {
		return
	}
	d, err := New(Options{})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	name := d.Info().Name
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("device heap across 2 processes on %s", name)
	runDevHeapRanks(t, "TestGPUDeviceHeap", 2, "gpu")
}
