package hip

import "github.com/capalloc/capalloc/internal/gpurt/gpurttest"

// The fake libamdhip64 (testdata/fakehip.c) is compiled with gcc by
// internal/gpurt/gpurttest and loaded through CAPALLOC_HIP_LIB, so the purego
// marshalling of every bound call runs here without a GPU. The tests both
// drivers share run once per vendor in internal/gpurt.

var fake = gpurttest.Fake{Src: "hip/testdata/fakehip.c", Name: "libamdhip64", LibEnv: LibEnv}

// openFake opens a driver on a fresh build of the fake, closed at the end
// of the test, and returns it with the fake's call log (gpurttest.Open).
var openFake = gpurttest.Opener(&fake, New)
