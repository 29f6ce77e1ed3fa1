package hip

import "github.com/capalloc/capalloc/internal/gpurt"

// LibEnv names a libamdhip64 to load instead of searching. It is the only
// candidate when set: an override that silently fell back to another
// library would hide a typo.
const LibEnv = "CAPALLOC_HIP_LIB"

// search: sonames are tried newest first: ROCm 7's runtime is
// libamdhip64.so.7, 6.x's .so.6, 5.x's .so.5 (Debian bookworm's 5.2.3); the
// unversioned name is a development link and comes last. The paths tried,
// in order (gpurt.Search.Candidates): $CAPALLOC_HIP_LIB alone if set; else
// each soname under $ROCM_PATH/lib (an explicit choice), then bare (the
// dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache), then under
// /opt/rocm/lib (ROCm's default install, often not in the loader's path).
var search = gpurt.Search{
	LibEnv:     LibEnv,
	HomeEnv:    "ROCM_PATH",
	HomeSub:    "lib",
	DefaultDir: "/opt/rocm/lib",
	Sonames:    []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"},
	Product:    "HIP",
}

// loader loads the runtime once per path and never unloads it (unloading
// it under live allocations or a running stream is undefined). A library
// that loaded but proved unusable is remembered too (Remember): the HIP
// runtime probes /dev/kfd at every call, so a machine without a GPU is
// probed once per library, not at every open. Two names for one file
// (libamdhip64.so, a link to .so.5) give the same dlopen handle: the
// second is not bound or probed again. A library that opens but is
// unusable (not a HIP runtime, lacking symbols, no device), and one that
// the caller's accept refuses (a runtime too old for what the caller
// asked), are skipped for the next one; when none is usable, the error
// wraps driver.ErrBackendUnavailable, names every path with its reason,
// and errors.As finds each unusable library's *Error with its hipError_t.
var loader = gpurt.Loader[runtimeAPI]{Vendor: &vendor, Search: &search, Bind: bind, Remember: true}
