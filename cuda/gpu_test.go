package cuda

import "testing"

// gpu opens device 0 through the CUDA runtime the loader finds, closed when
// the test ends, or skips the test, with the reason, where none opens: the
// *_gpu_test.go tests run on a machine with a CUDA GPU and skip elsewhere.
func gpu(tb testing.TB) *Driver {
	tb.Helper()
	d, err := New(Options{})
	if err != nil {
		tb.Skipf("no CUDA device: %v", err)
	}
	tb.Cleanup(func() { _ = d.Close() })
	return d
}
