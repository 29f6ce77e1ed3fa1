package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

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

// allocator is an allocator over d, closed when the test ends (before d,
// when d came from gpu or openFake); a failed Close fails the test.
func allocator(tb testing.TB, d *Driver) *alloc.Allocator {
	tb.Helper()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := a.Close(); err != nil {
			tb.Error(err)
		}
	})
	return a
}
