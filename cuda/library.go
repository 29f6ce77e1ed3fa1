package cuda

import "github.com/capalloc/capalloc/internal/gpurt"

// LibEnv names a libcudart to load instead of searching. It is the only
// candidate when set: an override that silently fell back to another
// library would hide a typo.
const LibEnv = "CAPALLOC_CUDA_LIB"

// search: sonames are tried newest first (CUDA 11.x's runtime is
// libcudart.so.11.0 for every 11.x; 11.4 is the minimum); the unversioned
// name is a toolkit's development link and comes last. The paths tried, in
// order (gpurt.Search.Candidates): $CAPALLOC_CUDA_LIB alone if set; else
// each soname under $CUDA_HOME/lib64 (an explicit choice), then bare (the
// dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache), then under
// /usr/local/cuda/lib64 (the toolkit's default install, often not in the
// loader's path).
var search = gpurt.Search{
	LibEnv:     LibEnv,
	HomeEnv:    "CUDA_HOME",
	HomeSub:    "lib64",
	DefaultDir: "/usr/local/cuda/lib64",
	Sonames:    []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
	Product:    "CUDA",
}

// loader loads the runtime once per path and never unloads it: unloading
// libcudart under live allocations or a running stream is undefined. A
// library that opens but is unusable (not a CUDA runtime, too old, no
// driver, a driver too old for it, no device: every reason that wraps
// driver.ErrBackendUnavailable) is skipped for the next one, so a machine
// with libcudart.so.13 first on the path and a CUDA 12 driver uses
// libcudart.so.12; it is left loaded (dlclose of a half-initialized CUDA
// runtime is not worth the risk) but not remembered, so a later open tries
// it again. When none is usable, the error wraps
// driver.ErrBackendUnavailable and names every path with its reason, and
// errors.As finds each unusable library's *Error with its cudaError_t.
var loader = gpurt.Loader[runtimeAPI]{Vendor: &vendor, Search: &search, Bind: bind}
