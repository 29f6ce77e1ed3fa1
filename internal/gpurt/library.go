package gpurt

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Search is where a vendor's runtime library is looked for.
type Search struct {
	LibEnv     string   // the override: when set, the only candidate
	HomeEnv    string   // the toolkit's root (CUDA_HOME, ROCM_PATH) ...
	HomeSub    string   // ... and its library folder under it (lib64, lib)
	DefaultDir string   // the toolkit's default install, often not in the loader's path
	Sonames    []string // newest first; the unversioned development link last
	Product    string   // "CUDA", "HIP": in the "no usable ... runtime library" message
}

// Candidates lists the paths tried, in order: $LibEnv alone if set; else
// each soname under $HomeEnv/HomeSub (an explicit choice), then bare (the
// dynamic loader's own search: LD_LIBRARY_PATH, ld.so.cache), then under
// DefaultDir.
func (s *Search) Candidates(getenv func(string) string) []string {
	if p := strings.TrimSpace(getenv(s.LibEnv)); p != "" {
		return []string{p}
	}
	var dirs []string
	if h := strings.TrimSpace(getenv(s.HomeEnv)); h != "" {
		dirs = append(dirs, filepath.Join(h, s.HomeSub))
	}
	dirs = append(dirs, "", s.DefaultDir)
	var out []string
	for _, d := range dirs {
		for _, n := range s.Sonames {
			if d == "" {
				out = append(out, n)
			} else {
				out = append(out, filepath.Join(d, n))
			}
		}
	}
	return out
}

// Loader opens a vendor's runtime library once per path and never unloads
// it (unloading a GPU runtime under live allocations or a running stream
// is undefined). R is the vendor's runtime type; Bind checks a library
// that dlopen accepted and resolves its symbols.
type Loader[R any] struct {
	Vendor *Vendor
	Search *Search
	Bind   func(path string, h uintptr) (*R, error)
	// Remember keeps a library that loaded but proved unusable out of
	// later searches (its reason is reported again without a new probe),
	// and binds a second name for an already opened file (the same dlopen
	// handle) as the first: the HIP runtime probes /dev/kfd at every call.
	// Without it an unusable library is left loaded but not remembered, so
	// a later open tries it again.
	Remember bool

	mu       sync.Mutex
	loaded   map[string]*R
	unusable map[string]error
	handles  map[uintptr]string // dlopen handle -> the first path that gave it
	aliases  map[string]string  // a later path -> that first path
}

// First tries paths in order. A path dlopen refuses, a library that opens
// but is unusable (every reason Bind gives that wraps
// driver.ErrBackendUnavailable), and one that accept (when not nil) refuses
// with such a reason are skipped for the next one. When none is usable,
// the error wraps driver.ErrBackendUnavailable and names every path with
// its reason. Any other failure stops the search and is returned as it is.
func (l *Loader[R]) First(paths []string, accept func(*R) error) (*R, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded == nil {
		l.loaded, l.unusable = map[string]*R{}, map[string]error{}
		l.handles, l.aliases = map[uintptr]string{}, map[string]string{}
	}
	var tried []string
	var causes []error // the unusable libraries' errors, for errors.As
	opened := false
	reason := func(err error) string {
		return strings.TrimPrefix(err.Error(), driver.ErrBackendUnavailable.Error()+": "+l.Vendor.Name+": ")
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
		if first, ok := l.aliases[path]; ok {
			if err, bad := l.unusable[first]; bad {
				opened = true
				sameAs(path, err)
				continue
			}
			path = first
		}
		rt, ok := l.loaded[path]
		if err, bad := l.unusable[path]; bad {
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
			if first, seen := l.handles[h]; l.Remember && seen && first != path {
				l.aliases[path] = first
				if err, bad := l.unusable[first]; bad {
					sameAs(path, err)
					continue
				}
				if rt = l.loaded[first]; rt == nil {
					continue // first failed otherwise, and that error was returned
				}
			} else {
				if l.Remember {
					l.handles[h] = path
				}
				rt, err = l.Bind(path, h)
				if errors.Is(err, driver.ErrBackendUnavailable) {
					// Left loaded: dlclose of a half-initialized runtime
					// is not worth the risk. The reason goes into the
					// final message.
					if l.Remember {
						l.unusable[path] = err
					}
					skip(err)
					continue
				}
				if err != nil {
					return nil, err
				}
				l.loaded[path] = rt
			}
		}
		if accept != nil {
			if err := accept(rt); err != nil {
				if !errors.Is(err, driver.ErrBackendUnavailable) {
					return nil, err
				}
				skip(err)
				continue
			}
		}
		return rt, nil
	}
	return nil, l.unavailable(tried, opened, causes)
}

// Load tries the search's candidates (Search.Candidates) in order: First.
func (l *Loader[R]) Load(getenv func(string) string, accept func(*R) error) (*R, error) {
	return l.First(l.Search.Candidates(getenv), accept)
}

// LoadError is the search's failure: its text lists every path with its
// reason; it matches driver.ErrBackendUnavailable and, through errors.As,
// each unusable library's own error (the vendor's typed error, with its
// code).
type LoadError struct {
	msg    string
	causes []error
}

func (e *LoadError) Error() string { return e.msg }
func (e *LoadError) Unwrap() []error {
	return append([]error{driver.ErrBackendUnavailable}, e.causes...)
}

func (l *Loader[R]) unavailable(tried []string, opened bool, causes []error) error {
	what := "no " + l.Search.Product + " runtime library could be loaded"
	if opened {
		what = "no usable " + l.Search.Product + " runtime library"
	}
	return &LoadError{
		msg: fmt.Sprintf("%v: %s: %s (set %s to its path, or %s); tried:\n  %s",
			driver.ErrBackendUnavailable, l.Vendor.Name, what, l.Search.LibEnv, l.Search.HomeEnv, strings.Join(tried, "\n  ")),
		causes: causes,
	}
}

// Loaded reports whether the library at path was bound and is kept.
func (l *Loader[R]) Loaded(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.loaded[path]
	return ok
}
