// Package fakes names the fake CUDA and HIP runtimes (gpurttest.Fake) for
// the tests of the packages above the drivers, so that each names them
// once: a test binary builds each fake once and loads a fresh copy per
// test (Fake.Lib). The cuda and hip packages' own tests keep their own
// Fake, since this package imports them.
package fakes

import (
	"testing"

	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

var (
	// CUDA is the fake libcudart, loaded through cuda.LibEnv.
	CUDA = &gpurttest.Fake{Src: "cuda/testdata/fakecudart.c", Name: "libcudart", LibEnv: cuda.LibEnv}
	// HIP is the fake libamdhip64, loaded through hip.LibEnv.
	HIP = &gpurttest.Fake{Src: "hip/testdata/fakehip.c", Name: "libamdhip64", LibEnv: hip.LibEnv}
)

// Each runs test once per fake runtime, as a subtest named after its
// backend ("cuda", "hip"), with a fresh build of that fake loaded.
func Each(t *testing.T, test func(t *testing.T, backend string)) {
	for _, f := range []struct {
		backend string
		fake    *gpurttest.Fake
	}{{"cuda", CUDA}, {"hip", HIP}} {
		t.Run(f.backend, func(t *testing.T) {
			f.fake.Lib(t)
			test(t, f.backend)
		})
	}
}
