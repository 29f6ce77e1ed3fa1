package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The fake libcudart (testdata/fakecudart.c) is compiled with gcc by
// internal/gpurt/gpurttest and loaded through CAPALLOC_CUDA_LIB, so the purego
// marshalling of every bound call runs here without a GPU. The tests both
// drivers share run once per vendor in internal/gpurt.

var fake = gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart", LibEnv: LibEnv}

// openFake builds the fake, points the library variable at it, and opens
// a driver on it, closed at the end of the test.
func openFake(t testing.TB, opts Options) (*Driver, *gpurttest.Log) {
	t.Helper()
	path := fake.Lib(t)
	log := gpurttest.OpenLog(t, path)
	d, err := New(opts)
	if err != nil {
		t.Fatalf("open on the fake runtime: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, log
}
