package cuda

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

// LibEnv names a libcudart to load instead of searching. It is the only
// candidate when set: an override that silently fell back to another
// library would hide a typo.
const LibEnv = "CAPALLOC_CUDA_LIB"

// sonames are tried newest first (CUDA 11.x's runtime is libcudart.so.11.0
// for every 11.x; 11.4 is the minimum); the unversioned name is a toolkit's
// development link and comes last.
var sonames = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"}

// candidates lists the paths tried, in order: $CAPALLOC_CUDA_LIB alone if
// set; else each soname under $CUDA_HOME/lib64 (an explicit choice), then
// bare (the dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache), then
// under /usr/local/cuda/lib64 (the toolkit's default install, often not in
// the loader's path).
func candidates(getenv func(string) string) []string {
	if p := strings.TrimSpace(getenv(LibEnv)); p != "" {
		return []string{p}
	}
	var dirs []string
	if h := strings.TrimSpace(getenv("CUDA_HOME")); h != "" {
		dirs = append(dirs, filepath.Join(h, "lib64"))
	}
	dirs = append(dirs, "", "/usr/local/cuda/lib64")
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

// The runtime is loaded once per path and never unloaded: unloading
// libcudart under live allocations or a running stream is undefined.
var (
	loadMu sync.Mutex
	loaded = map[string]*runtimeAPI{}
)

// loadRuntime opens the first usable candidate and binds it.
func loadRuntime(getenv func(string) string) (*runtimeAPI, error) {
	return loadFirst(candidates(getenv))
}

// loadFirst tries paths in order. A path dlopen refuses, or a library that
// opens but is unusable (not a CUDA runtime, too old, no driver, a driver
// too old for it, no device: every reason that wraps
// alloc.ErrBackendUnavailable) is skipped for the next one, so a machine
// with libcudart.so.13 first on the path and a CUDA 12 driver uses
// libcudart.so.12. When none is usable, the error wraps
// alloc.ErrBackendUnavailable and names every path with its reason. Any
// other failure stops the search and is returned as it is.
func loadFirst(paths []string) (*runtimeAPI, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	var tried []string
	var causes []error // the unusable libraries' errors, for errors.As
	opened := false
	for _, path := range paths {
		if rt, ok := loaded[path]; ok {
			return rt, nil
		}
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
		rt, err := bind(path, h)
		if errors.Is(err, alloc.ErrBackendUnavailable) {
			// Left loaded: dlclose of a half-initialized CUDA runtime is not
			// worth the risk. The reason goes into the final message.
			tried = append(tried, strings.TrimPrefix(err.Error(), alloc.ErrBackendUnavailable.Error()+": cuda: "))
			causes = append(causes, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		loaded[path] = rt
		return rt, nil
	}
	return nil, unavailable(tried, opened, causes)
}

// loadError is the search's failure: its text lists every path with its
// reason; it matches alloc.ErrBackendUnavailable and, through errors.As,
// each unusable library's own error (a *Error with its cudaError_t).
type loadError struct {
	msg    string
	causes []error
}

func (e *loadError) Error() string { return e.msg }
func (e *loadError) Unwrap() []error {
	return append([]error{alloc.ErrBackendUnavailable}, e.causes...)
}

func unavailable(tried []string, opened bool, causes []error) error {
	what := "no CUDA runtime library could be loaded"
	if opened {
		what = "no usable CUDA runtime library"
	}
	return &loadError{
		msg: fmt.Sprintf("%v: cuda: %s (set %s to its path, or CUDA_HOME); tried:\n  %s",
			alloc.ErrBackendUnavailable, what, LibEnv, strings.Join(tried, "\n  ")),
		causes: causes,
	}
}
