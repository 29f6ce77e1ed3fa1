package nccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// EnvLib names the one NCCL library to load instead of searching.
const EnvLib = "CAPALLOC_NCCL_LIB"

// EnvRCCLLib names the one RCCL library to load instead of searching.
const EnvRCCLLib = "CAPALLOC_RCCL_LIB"

// MinVersion is NCCL 2.9 (version code 20900): collectives on a capturing
// stream become graph nodes from then on.
const MinVersion = 20900

// MinRCCLVersion is RCCL 2.13.4 (version code 21304, NCCL_VERSION(2,13,4)
// in rccl.h). RCCL's CHANGELOG: 2.12.10 for ROCm 5.3.0 added "initial
// hipGraph support via opt-in environment variable RCCL_ENABLE_HIPGRAPH";
// 2.13.4 for ROCm 5.4.0: "RCCL_ENABLE_HIPGRAPH environment variable is no
// longer necessary to enable hipGraph support". So 2.13.4 is the first
// whose collectives are captured into a hipGraph as they come.
const MinRCCLVersion = 21304

// rcclMarker is exported by RCCL and not by NCCL: rccl.h declares
// ncclAllToAllv under "#define RCCL_ALLTOALLV 1", RCCL's extension (in
// RCCL since ROCm 3.10, before MinRCCLVersion); NVIDIA's nccl.h has no
// such function.
const rcclMarker = "ncclAllToAllv"

// ErrWrongLibrary: a library of the other vendor (RCCL where NCCL was
// asked, or NCCL where RCCL was). It wraps driver.ErrBackendUnavailable.
var ErrWrongLibrary = fmt.Errorf("%w: wrong library", driver.ErrBackendUnavailable)

// Library is a loaded NCCL or RCCL (the same API, nccl.h's, built for HIP).
type Library struct {
	Path    string
	Version int  // NCCL_VERSION_CODE: major*10000 + minor*100 + patch
	RCCL    bool // RCCL (HIP streams, the hip driver's capture domain), not NCCL

	// domain is the capture domain of the driver whose streams this
	// library's collectives run on: NCCL shares the CUDA runtime's
	// process-wide rules, RCCL the HIP runtime's.
	domain string

	errorString                                               func(int32) string // ncclGetErrorString, off the hot path: RegisterFunc
	getErrorString, commInitAll, commDestroy                  uintptr
	allReduce, allGather, reduceScatter, groupStart, groupEnd uintptr
	send, recv, broadcast, reduce                             uintptr
	getAsyncError, commAbort, commCount, commUserRank         uintptr
	getUniqueID                                               uintptr
	// ncclCommInitRank takes the 128-byte ncclUniqueId by value, which
	// the amd64 and arm64 C ABIs pass differently (on the stack; as a
	// pointer to a caller's copy): RegisterFunc lays it out per ABI.
	commInitRank func(comm *uintptr, nranks int32, id UniqueID, rank int32) int32
	// ncclCommInitRankConfig (2.14; optional, config.go): nil when absent.
	commInitRankConfig func(comm *uintptr, nranks int32, id UniqueID, rank int32, cfg *configABI) int32
	// Optional (window.go, split.go): 0 when this NCCL lacks them.
	memAlloc, memFree, winRegister, winDeregister uintptr
	commSplit                                     uintptr

	// Open groups by thread id (group.go).
	groupsOpen atomic.Int32
	groupsMu   sync.Mutex
	groups     map[int]*group
}

// vendor is what tells NCCL and RCCL apart: where to look, the oldest
// usable version, the capture domain.
type vendor struct {
	name   string // "NCCL", "RCCL"
	rccl   bool
	env    string
	min    int
	domain string // the driver whose capture domain a communicator joins
	why    string // why min: the first version whose collectives capture
	hint   string // how to point the search at a library
	mu     sync.Mutex
	cached *Library
}

var (
	ncclVendor = &vendor{name: "NCCL", env: EnvLib, min: MinVersion, domain: "cuda",
		why: "the first whose collectives can be captured", hint: "CUDA_HOME"}
	rcclVendor = &vendor{name: "RCCL", rccl: true, env: EnvRCCLLib, min: MinRCCLVersion, domain: "hip",
		why: "the first whose collectives are captured into hipGraphs without RCCL_ENABLE_HIPGRAPH", hint: "ROCM_PATH"}
)

// candidates lists where to look for NCCL: only $CAPALLOC_NCCL_LIB when
// set; otherwise the loader's path, then CUDA_HOME and the usual install
// places.
func candidates(getenv func(string) string) []string {
	if p := getenv(EnvLib); p != "" {
		return []string{p}
	}
	paths := []string{"libnccl.so.2", "libnccl.so"}
	for _, dir := range []string{filepath.Join(getenv("CUDA_HOME"), "lib64"), "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"} {
		if dir != "lib64" {
			paths = append(paths, filepath.Join(dir, "libnccl.so.2"))
		}
	}
	return paths
}

// rcclCandidates lists where to look for RCCL: only $CAPALLOC_RCCL_LIB
// when set (a typo must not fall back silently); otherwise the loader's
// path, then $ROCM_PATH/lib and /opt/rocm/lib.
func rcclCandidates(getenv func(string) string) []string {
	if p := getenv(EnvRCCLLib); p != "" {
		return []string{p}
	}
	paths := []string{"librccl.so.1", "librccl.so"}
	if root := getenv("ROCM_PATH"); root != "" {
		paths = append(paths, filepath.Join(root, "lib", "librccl.so.1"))
	}
	return append(paths, "/opt/rocm/lib/librccl.so.1")
}

// Load finds and binds NCCL, once per process. A library that is RCCL is
// refused with ErrWrongLibrary (use LoadRCCL).
func Load() (*Library, error) { return ncclVendor.load(candidates(os.Getenv)) }

// LoadRCCL finds and binds RCCL, once per process: RCCL 2.13.4 or later
// (MinRCCLVersion). A library that is NCCL is refused with ErrWrongLibrary
// (use Load). Its communicators belong to the hip driver's capture domain.
func LoadRCCL() (*Library, error) { return rcclVendor.load(rcclCandidates(os.Getenv)) }

// LoadFor loads the collective library for a driver: "cuda" is NCCL
// (Load), "hip" is RCCL (LoadRCCL). Any other name is an
// alloc.ErrInvalidValue.
func LoadFor(driverName string) (*Library, error) {
	switch driverName {
	case "cuda":
		return Load()
	case "hip":
		return LoadRCCL()
	}
	return nil, fmt.Errorf("%w: nccl: no collective library for driver %q (cuda: NCCL, hip: RCCL)", alloc.ErrInvalidValue, driverName)
}

// searchError is a failed search: its message lists every path tried and
// why; it matches driver.ErrBackendUnavailable and each path's own error
// (ErrWrongLibrary among them).
type searchError struct {
	msg  string
	errs []error
}

func (e *searchError) Error() string   { return e.msg }
func (e *searchError) Unwrap() []error { return e.errs }

func (v *vendor) load(paths []string) (*Library, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cached != nil {
		return v.cached, nil
	}
	tried := make([]string, 0, len(paths))
	errs := []error{driver.ErrBackendUnavailable}
	for _, path := range paths {
		l, err := v.loadPath(path)
		if errors.Is(err, driver.ErrBackendUnavailable) {
			tried = append(tried, strings.TrimPrefix(err.Error(), driver.ErrBackendUnavailable.Error()+": nccl: "))
			errs = append(errs, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		v.cached = l
		return l, nil
	}
	return nil, &searchError{
		msg: fmt.Sprintf("%v: nccl: no usable %s library (set %s to its path, or %s); tried:\n  %s",
			driver.ErrBackendUnavailable, v.name, v.env, v.hint, strings.Join(tried, "\n  ")),
		errs: errs,
	}
}

// LoadPath loads and binds the NCCL library at path (a file name is
// searched by the dynamic loader), without Load's search and without
// caching it: a library that is missing or older than 2.9 is an
// driver.ErrBackendUnavailable whose message says "nccl: path:" and why;
// RCCL is ErrWrongLibrary.
func LoadPath(path string) (*Library, error) { return ncclVendor.loadPath(path) }

// LoadRCCLPath is LoadPath for RCCL: older than 2.13.4 is refused with
// the version, NCCL with ErrWrongLibrary.
func LoadRCCLPath(path string) (*Library, error) { return rcclVendor.loadPath(path) }

func (v *vendor) loadPath(path string) (*Library, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, path) {
			msg = path + ": " + msg
		}
		return nil, fmt.Errorf("%w: nccl: %s", driver.ErrBackendUnavailable, msg)
	}
	return v.bind(path, h)
}

// bind resolves every symbol with Dlsym (never RegisterLibFunc, which
// panics on a missing one), tells NCCL from RCCL and checks the version.
func (v *vendor) bind(path string, h uintptr) (*Library, error) {
	unusable := func(format string, args ...any) error {
		return fmt.Errorf("%w: nccl: %s: %s", driver.ErrBackendUnavailable, path, fmt.Sprintf(format, args...))
	}
	l := &Library{Path: path, RCCL: v.rccl, domain: v.domain}
	var getVersion, commInitRank uintptr
	for _, s := range []struct {
		name string
		p    *uintptr
	}{
		{"ncclGetVersion", &getVersion},
		{"ncclGetErrorString", &l.getErrorString},
		{"ncclCommInitAll", &l.commInitAll},
		{"ncclCommDestroy", &l.commDestroy},
		{"ncclAllReduce", &l.allReduce},
		{"ncclAllGather", &l.allGather},
		{"ncclReduceScatter", &l.reduceScatter},
		{"ncclGroupStart", &l.groupStart},
		{"ncclGroupEnd", &l.groupEnd},
		{"ncclSend", &l.send},
		{"ncclRecv", &l.recv},
		{"ncclBroadcast", &l.broadcast},
		{"ncclReduce", &l.reduce},
		{"ncclCommGetAsyncError", &l.getAsyncError},
		{"ncclCommAbort", &l.commAbort},
		{"ncclCommCount", &l.commCount},
		{"ncclCommUserRank", &l.commUserRank},
		{"ncclGetUniqueId", &l.getUniqueID},
		{"ncclCommInitRank", &commInitRank},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, unusable("not an %s library (no %s)", v.name, s.name)
		}
		*s.p = p
	}
	marker, err := purego.Dlsym(h, rcclMarker)
	isRCCL := err == nil && marker != 0
	switch {
	case isRCCL && !v.rccl:
		return nil, fmt.Errorf("%w: nccl: %s: it is RCCL (it exports %s, RCCL's own), not NCCL: load it with LoadRCCL or %s", ErrWrongLibrary, path, rcclMarker, EnvRCCLLib)
	case !isRCCL && v.rccl:
		return nil, fmt.Errorf("%w: nccl: %s: it is NCCL, not RCCL (it lacks %s, which every RCCL exports): load it with Load or %s", ErrWrongLibrary, path, rcclMarker, EnvLib)
	}
	bindOptional(l, h)
	purego.RegisterFunc(&l.errorString, l.getErrorString)
	if structArgsChecked() {
		// Elsewhere RegisterFunc may panic on the struct argument, and
		// the layout was never checked: InitRank refuses instead.
		purego.RegisterFunc(&l.commInitRank, commInitRank)
		if p, err := purego.Dlsym(h, "ncclCommInitRankConfig"); err == nil && p != 0 {
			purego.RegisterFunc(&l.commInitRankConfig, p)
		}
	}
	var ver int32
	if r := gpurt.Call(getVersion, uintptr(unsafe.Pointer(&ver))); r != 0 {
		return nil, unusable("ncclGetVersion returned %d", r)
	}
	l.Version = int(ver)
	if l.Version < v.min {
		return nil, unusable("%s version %s is older than %s, %s", v.name, VersionString(l.Version), VersionString(v.min), v.why)
	}
	return l, nil
}

// VersionString renders an NCCL version code (2.9 and later:
// major*10000 + minor*100 + patch).
func VersionString(code int) string {
	return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
}

// structArgsChecked reports whether passing ncclUniqueId by value through
// purego was checked on this architecture (amd64 natively, arm64 under
// qemu; docs/symmetric-heap.md).
func structArgsChecked() bool {
	return runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64"
}
