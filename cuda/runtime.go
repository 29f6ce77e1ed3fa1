package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

// runtimeAPI is one loaded libcudart: its versions and resolved symbols.
// Calls go through purego.SyscallN on the cached address (about 65 ns, no
// allocation) rather than reflective RegisterFunc wrappers (170-250 ns plus
// allocations); only cudaGetErrorString, off the hot path, uses RegisterFunc
// for its string result.
type runtimeAPI struct {
	path           string
	runtimeVersion int
	driverVersion  int
	errorString    func(code int32) string
	symbols
}

// bind checks the versions of the library at path and resolves its symbols.
func bind(path string, h uintptr) (*runtimeAPI, error) {
	rt := &runtimeAPI{path: path}
	var getRT, getDrv, getStr uintptr
	for _, b := range []binding{
		{"cudaRuntimeGetVersion", &getRT, false},
		{"cudaDriverGetVersion", &getDrv, false},
		{"cudaGetErrorString", &getStr, false},
	} {
		addr, err := purego.Dlsym(h, b.name)
		if err != nil || addr == 0 {
			return nil, fmt.Errorf("%w: cuda: %s is not a CUDA runtime: no symbol %s", alloc.ErrBackendUnavailable, path, b.name)
		}
		*b.addr = addr
	}
	purego.RegisterFunc(&rt.errorString, getStr)

	// The driver's version first: the real runtime answers it (0 when no
	// driver is installed) even when it cannot report its own.
	var v int32
	if code := call(getDrv, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("driver version", "cudaDriverGetVersion", code, "")
	}
	rt.driverVersion = int(v)
	v = 0
	if code := call(getRT, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("runtime version", "cudaRuntimeGetVersion", code, rt.driverReason(code))
	}
	rt.runtimeVersion = int(v)
	if err := checkVersions(path, rt.runtimeVersion, rt.driverVersion); err != nil {
		return nil, err
	}
	bs, err := rt.bindings(rt.runtimeVersion)
	if err != nil {
		return nil, err
	}
	if err := resolve(h, path, bs); err != nil {
		return nil, err
	}
	return rt, nil
}

// driverReason explains a failed cudaRuntimeGetVersion from the driver's
// version. Without a driver, or with one too old for it, the real runtime
// fails that call itself with 35 (cudaErrorInsufficientDriver), and
// cudaDriverGetVersion reports 0 or the old version.
func (rt *runtimeAPI) driverReason(code int32) string {
	switch {
	case rt.driverVersion == 0:
		return "no CUDA driver is installed (cudaDriverGetVersion reports 0: libcuda.so.1 is missing)"
	case code == errInsufficientDriver:
		return fmt.Sprintf("the driver supports CUDA %s, older than this runtime needs", versionString(rt.driverVersion))
	}
	return ""
}

// unusable is the error of a library that loaded but cannot be used: it
// names the library and why, keeps the code (errors.As gives the *Error)
// and wraps alloc.ErrBackendUnavailable whatever the code, so the loader
// moves on to the next candidate.
func (rt *runtimeAPI) unusable(op, fn string, code int32, why string) error {
	e := rt.fail(rt.path+": "+op, fn, code)
	e.kind = alloc.ErrBackendUnavailable
	if why != "" {
		return fmt.Errorf("%w: %s", e, why)
	}
	return e
}

// checkVersions refuses a runtime older than minRuntimeVersion, a machine
// without a driver (cudaDriverGetVersion reports 0), and a driver of an
// older major version than the runtime (CUDA's minor-version compatibility
// holds only within a major version).
func checkVersions(path string, runtimeVersion, driverVersion int) error {
	if runtimeVersion < minRuntimeVersion {
		return fmt.Errorf("%w: cuda: %s is CUDA runtime %s; the minimum is %s",
			alloc.ErrBackendUnavailable, path, versionString(runtimeVersion), versionString(minRuntimeVersion))
	}
	if driverVersion == 0 {
		return fmt.Errorf("%w: cuda: %s loaded (runtime %s) but no CUDA driver is installed (cudaDriverGetVersion reports 0)",
			alloc.ErrBackendUnavailable, path, versionString(runtimeVersion))
	}
	if driverVersion/1000 < runtimeVersion/1000 {
		return fmt.Errorf("%w: cuda: %s is CUDA runtime %s but the driver supports only CUDA %s",
			alloc.ErrBackendUnavailable, path, versionString(runtimeVersion), versionString(driverVersion))
	}
	return nil
}

// call invokes a C function returning cudaError_t. go:uintptrescapes keeps
// the objects behind uintptr(unsafe.Pointer(p)) arguments alive and in
// place (moved to the heap) for the duration of the call, as for SyscallN.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r1, _, _ := purego.SyscallN(fn, args...)
	return int32(r1) // cudaError_t is a C int: the upper half is garbage
}

// outArg, in callHot's arguments, stands for a pointer to the frame's
// 8-byte result slot (a C out-parameter).
const outArg = ^uintptr(0)

// frame is a pooled argument block for callHot.
type frame struct {
	args [6]uintptr
	out  uint64
}

var frames = sync.Pool{New: func() any { return new(frame) }}

// callHot is call without allocating, for the calls made per operation
// (cudaStreamIsCapturing runs before every pool hit; the async allocs,
// frees, copies, memsets and launches). call's go:uintptrescapes moves each
// pointed-to Go local, and the variadic slice, to the heap at every call;
// here the slice handed to SyscallN is the pooled frame's array and an
// out-parameter is the frame's slot (outArg), so the call allocates
// nothing. The price: callHot must not be given a pointer to a Go stack
// variable, only outArg, device addresses, C memory (cudaHostAlloc) or heap
// memory the caller keeps alive (a []byte that came through the Driver
// interface has escaped to the heap). Heap objects never move.
func callHot(fn uintptr, args ...uintptr) (code int32, out uint64) {
	f := frames.Get().(*frame)
	f.out = 0
	n := copy(f.args[:], args)
	for i := range n {
		if f.args[i] == outArg {
			f.args[i] = uintptr(unsafe.Pointer(&f.out))
		}
	}
	r1, _, _ := purego.SyscallN(fn, f.args[:n]...)
	out = f.out
	frames.Put(f)
	return int32(r1), out
}

// fail builds the typed error of a failed call.
func (rt *runtimeAPI) fail(op, fn string, code int32) *Error {
	return &Error{Op: op, Call: fn, Code: int(code), Text: rt.text(code)}
}

// check is nil for cudaSuccess, else the typed error.
func (rt *runtimeAPI) check(op, fn string, code int32) error {
	if code == 0 {
		return nil
	}
	return rt.fail(op, fn, code)
}

func (rt *runtimeAPI) text(code int32) string {
	if rt.errorString == nil {
		return "unknown error"
	}
	return rt.errorString(code)
}

// first is callHot's code, for calls without an out-parameter.
func first(code int32, _ uint64) int32 { return code }
