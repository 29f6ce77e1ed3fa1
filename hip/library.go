package hip

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

// LibEnv names a libamdhip64 to load instead of searching. It is the only
// candidate when set: an override that silently fell back to another
// library would hide a typo.
const LibEnv = "CAPALLOC_HIP_LIB"

// sonames are tried newest first: ROCm 7's runtime is libamdhip64.so.7,
// 6.x's .so.6, 5.x's .so.5 (Debian bookworm's 5.2.3); the unversioned
// name is a development link and comes last.
var sonames = []string{"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"}

// candidates lists the paths tried, in order: $CAPALLOC_HIP_LIB alone if
// set; else each soname under $ROCM_PATH/lib (an explicit choice), then
// bare (the dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache),
// then under /opt/rocm/lib (ROCm's default install, often not in the
// loader's path).
func candidates(getenv func(string) string) []string {
	if p := strings.TrimSpace(getenv(LibEnv)); p != "" {
		return []string{p}
	}
	var dirs []string
	if h := strings.TrimSpace(getenv("ROCM_PATH")); h != "" {
		dirs = append(dirs, filepath.Join(h, "lib"))
	}
	dirs = append(dirs, "", "/opt/rocm/lib")
	var out []string
	for _, d := range dirs {
		for _, n := range sonames {
			if d == "" {
				out = append(out, n)
			} else {
				out = append(out, filepath.Join(d, n))
			}
		}
	}
	return out
}

// The runtime is loaded once per path and never unloaded (unloading it
// under live allocations or a running stream is undefined). A library that
// loaded but proved unusable is remembered too: the HIP runtime probes
// /dev/kfd at every call, so a machine without a GPU is probed once per
// library, not at every open.
// Two names for one file (libamdhip64.so, a link to .so.5) give the same
// dlopen handle: the second is not bound or probed again.
var (
	loadMu   sync.Mutex
	loaded   = map[string]*runtimeAPI{}
	unusable = map[string]error{}
	handles  = map[uintptr]string{} // dlopen handle -> the first path that gave it
	aliases  = map[string]string{}  // a later path -> that first path
)

// loadRuntime opens the first candidate that binds and that accept takes.
func loadRuntime(getenv func(string) string, accept func(*runtimeAPI) error) (*runtimeAPI, error) {
	return loadFirst(candidates(getenv), accept)
}

// loadFirst tries paths in order. A path dlopen refuses, a library that
// opens but is unusable (not a HIP runtime, lacking symbols, no device:
// every reason that wraps alloc.ErrBackendUnavailable), and one that accept
// refuses (a runtime too old for what the caller asked) are skipped for the
// next one. When none is usable, the error wraps
// alloc.ErrBackendUnavailable and names every path with its reason. Any
// other failure stops the search and is returned as it is.
func loadFirst(paths []string, accept func(*runtimeAPI) error) (*runtimeAPI, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	var tried []string
	var causes []error // the unusable libraries' errors, for errors.As
	opened := false
	reason := func(err error) string {
		return strings.TrimPrefix(err.Error(), alloc.ErrBackendUnavailable.Error()+": hip: ")
	}
	skip := func(err error) {
		tried = append(tried, reason(err))
		causes = append(causes, err)
	}
	// sameAs reports a second name for a library already refused, with
	// the first name's reason (which starts with that name); it is not
	// probed again.
	sameAs := func(path string, err error) {
		tried = append(tried, fmt.Sprintf("%s: the same library as %s", path, reason(err)))
		causes = append(causes, err)
	}
	for _, path := range paths {
		if first, ok := aliases[path]; ok {
			if err, bad := unusable[first]; bad {
				opened = true
				sameAs(path, err)
				continue
			}
			path = first
		}
		rt, ok := loaded[path]
		if err, bad := unusable[path]; bad {
			opened = true
			skip(err)
			continue
		}
		if !ok {
			h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
			if err != nil {
				msg := err.Error() // dlerror usually starts with the path already
				if !strings.HasPrefix(msg, path) {
					msg = path + ": " + msg
				}
				tried = append(tried, msg)
				continue
			}
			opened = true
			if first, seen := handles[h]; seen && first != path {
				aliases[path] = first
				if err, bad := unusable[first]; bad {
					sameAs(path, err)
					continue
				}
				if rt = loaded[first]; rt == nil {
					continue // first failed otherwise, and that error was returned
				}
			} else {
				handles[h] = path
				rt, err = bind(path, h)
				if errors.Is(err, alloc.ErrBackendUnavailable) {
					// Left loaded: dlclose of a half-initialized runtime
					// is not worth the risk.
					unusable[path] = err
					skip(err)
					continue
				}
				if err != nil {
					return nil, err
				}
				loaded[path] = rt
			}
		}
		opened = true
		if err := accept(rt); err != nil {
			if !errors.Is(err, alloc.ErrBackendUnavailable) {
				return nil, err
			}
			skip(err)
			continue
		}
		return rt, nil
	}
	return nil, unavailable(tried, opened, causes)
}

// loadError is the search's failure: its text lists every path with its
// reason; it matches alloc.ErrBackendUnavailable and, through errors.As,
// each unusable library's own error (a *Error with its hipError_t).
type loadError struct {
	msg    string
	causes []error
}

func (e *loadError) Error() string { return e.msg }
func (e *loadError) Unwrap() []error {
	return append([]error{alloc.ErrBackendUnavailable}, e.causes...)
}

func unavailable(tried []string, opened bool, causes []error) error {
	what := "no HIP runtime library could be loaded"
	if opened {
		what = "no usable HIP runtime library"
	}
	return &loadError{
		msg: fmt.Sprintf("%v: hip: %s (set %s to its path, or ROCM_PATH); tried:\n  %s",
			alloc.ErrBackendUnavailable, what, LibEnv, strings.Join(tried, "\n  ")),
		causes: causes,
	}
}
