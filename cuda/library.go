package cuda

import (
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

// sonames are tried newest first; the unversioned name is a toolkit's
// development link and comes last.
var sonames = []string{"libcudart.so.13", "libcudart.so.12", "libcudart.so"}

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

// loadRuntime opens the first candidate that dlopen accepts and binds it.
// When none opens, the error wraps alloc.ErrBackendUnavailable and names
// every path with dlopen's reason. A library that opens but cannot be used
// (too old, missing symbols, no driver) is not skipped for the next one:
// the reason is reported as it is.
func loadRuntime(getenv func(string) string) (*runtimeAPI, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	var tried []string
	for _, path := range candidates(getenv) {
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
		rt, err := bind(path, h)
		if err != nil {
			// Leave it loaded: dlclose of a half-initialized CUDA runtime
			// is not worth the risk, and the process is told why.
			return nil, err
		}
		loaded[path] = rt
		return rt, nil
	}
	return nil, unavailable(tried)
}

func unavailable(tried []string) error {
	return fmt.Errorf("%w: cuda: no CUDA runtime library could be loaded (set %s to its path, or CUDA_HOME); tried:\n  %s",
		alloc.ErrBackendUnavailable, LibEnv, strings.Join(tried, "\n  "))
}
