package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The fake libcudart (testdata/fakecudart.c) is compiled with gcc by
// internal/gpurt/gpurttest and loaded through CAPALLOC_CUDA_LIB, so the purego
// marshalling of every bound call runs here without a GPU. The tests both
// drivers share run once per vendor in internal/gpurt.

var fake = gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart"}

// fakeLib compiles the fake into a fresh path (a fresh load, so a fresh
// version and state) and points CAPALLOC_CUDA_LIB at it.
func fakeLib(t testing.TB) string {
	t.Helper()
	return fakeLibWith(t)
}

// fakeLibWith is fakeLib with preprocessor flags (-DFAKE_NO_GRAPH_MEM_TRIM).
func fakeLibWith(t testing.TB, cflags ...string) string {
	t.Helper()
	path := fake.New(t, cflags...)
	t.Setenv(LibEnv, path)
	return path
}

// prepareFake reads the fake's source once, or skips the test without gcc.
func prepareFake(t testing.TB) { t.Helper(); fake.Prepare(t) }

// buildFake compiles the fake to path with preprocessor flags.
func buildFake(t testing.TB, path string, cflags ...string) {
	t.Helper()
	fake.Build(t, path, cflags...)
}

// buildShared compiles C source into a shared library at path, the shared
// core's folder on the include path (a test fixture: the package itself
// has no cgo); it skips without gcc.
func buildShared(t testing.TB, path string, src []byte, cflags ...string) {
	t.Helper()
	gpurttest.BuildShared(t, path, src, cflags...)
}

// fakeLog reads (and clears) the fake's call log.
type fakeLog = gpurttest.Log

func openFakeLog(t testing.TB, path string) *fakeLog { t.Helper(); return gpurttest.OpenLog(t, path) }

// find returns the log lines that contain every part.
func find(lines []string, parts ...string) []string { return gpurttest.Find(lines, parts...) }

func openFake(t testing.TB, opts Options) (*Driver, *fakeLog) {
	t.Helper()
	path := fakeLib(t)
	log := openFakeLog(t, path)
	d, err := New(opts)
	if err != nil {
		t.Fatalf("open on the fake runtime: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, log
}
