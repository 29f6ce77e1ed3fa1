package nccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

// EnvLib names the one library to load instead of searching.
const EnvLib = "CAPALLOC_NCCL_LIB"

// MinVersion is NCCL 2.9 (version code 20900): collectives on a capturing
// stream become graph nodes from then on.
const MinVersion = 20900

// Library is a loaded NCCL.
type Library struct {
	Path    string
	Version int // NCCL_VERSION_CODE: major*10000 + minor*100 + patch

	errorString                                               func(int32) string // ncclGetErrorString, off the hot path: RegisterFunc
	getErrorString, commInitAll, commDestroy                  uintptr
	allReduce, allGather, reduceScatter, groupStart, groupEnd uintptr
	send, recv                                                uintptr
	getUniqueID                                               uintptr
	// ncclCommInitRank takes the 128-byte ncclUniqueId by value, which
	// the amd64 and arm64 C ABIs pass differently (on the stack; as a
	// pointer to a caller's copy): RegisterFunc lays it out per ABI.
	commInitRank func(comm *uintptr, nranks int32, id UniqueID, rank int32) int32
	// Optional (window.go): 0 when this NCCL lacks them.
	memAlloc, memFree, winRegister, winDeregister uintptr
}

var (
	loadMu sync.Mutex
	loaded *Library
)

// candidates lists where to look: only $CAPALLOC_NCCL_LIB when set;
// otherwise the loader's path, then CUDA_HOME and the usual install places.
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

// Load finds and binds NCCL, once per process.
func Load() (*Library, error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loaded != nil {
		return loaded, nil
	}
	var tried []string
	for _, path := range candidates(os.Getenv) {
		l, err := LoadPath(path)
		if errors.Is(err, alloc.ErrBackendUnavailable) {
			tried = append(tried, strings.TrimPrefix(err.Error(), alloc.ErrBackendUnavailable.Error()+": nccl: "))
			continue
		}
		if err != nil {
			return nil, err
		}
		loaded = l
		return l, nil
	}
	return nil, fmt.Errorf("%w: nccl: no usable NCCL library (set %s to its path, or CUDA_HOME); tried:\n  %s",
		alloc.ErrBackendUnavailable, EnvLib, strings.Join(tried, "\n  "))
}

// LoadPath loads and binds the NCCL library at path (a file name is
// searched by the dynamic loader), without Load's search and without
// caching it: a library that is missing, is not NCCL or is older than 2.9
// is an alloc.ErrBackendUnavailable whose message starts with "nccl:
// path:".
func LoadPath(path string) (*Library, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, path) {
			msg = path + ": " + msg
		}
		return nil, fmt.Errorf("%w: nccl: %s", alloc.ErrBackendUnavailable, msg)
	}
	l, err := bind(path, h)
	if errors.Is(err, alloc.ErrBackendUnavailable) {
		return nil, fmt.Errorf("%w: nccl: %s: %s", alloc.ErrBackendUnavailable, path, strings.TrimPrefix(err.Error(), alloc.ErrBackendUnavailable.Error()+": nccl: "))
	}
	return l, err
}

// bind resolves every symbol with Dlsym (never RegisterLibFunc, which
// panics on a missing one) and checks the version.
func bind(path string, h uintptr) (*Library, error) {
	l := &Library{Path: path}
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
		{"ncclGetUniqueId", &l.getUniqueID},
		{"ncclCommInitRank", &commInitRank},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%w: nccl: not an NCCL library (no %s)", alloc.ErrBackendUnavailable, s.name)
		}
		*s.p = p
	}
	bindOptional(l, h)
	purego.RegisterFunc(&l.errorString, l.getErrorString)
	if structArgsChecked() {
		// Elsewhere RegisterFunc may panic on the struct argument, and
		// the layout was never checked: InitRank refuses instead.
		purego.RegisterFunc(&l.commInitRank, commInitRank)
	}
	var v int32
	if r := call(getVersion, uintptr(unsafe.Pointer(&v))); r != 0 {
		return nil, fmt.Errorf("%w: nccl: ncclGetVersion returned %d", alloc.ErrBackendUnavailable, r)
	}
	l.Version = int(v)
	if l.Version < MinVersion {
		return nil, fmt.Errorf("%w: nccl: version %s is older than 2.9, the first whose collectives can be captured", alloc.ErrBackendUnavailable, VersionString(l.Version))
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
