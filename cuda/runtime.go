package cuda

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
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
	// ipcOpen is cudaIpcOpenMemHandle, bound with RegisterFunc for its
	// 64-byte struct argument passed by value (off the hot path).
	ipcOpen func(devPtr *uintptr, handle ipcMemHandle, flags uint32) int32
	symbols
}

// bind checks the versions of the library at path and resolves its symbols.
func bind(path string, h uintptr) (*runtimeAPI, error) {
	rt := &runtimeAPI{path: path, driverVersion: -1} // -1: not read yet
	var getRT, getDrv, getStr uintptr
	for _, b := range []binding{
		{"cudaRuntimeGetVersion", &getRT, false},
		{"cudaDriverGetVersion", &getDrv, false},
		{"cudaGetErrorString", &getStr, false},
	} {
		addr, err := purego.Dlsym(h, b.name)
		if err != nil || addr == 0 {
			return nil, fmt.Errorf("%w: cuda: %s: not a CUDA runtime: no symbol %s", alloc.ErrBackendUnavailable, path, b.name)
		}
		*b.addr = addr
	}
	purego.RegisterFunc(&rt.errorString, getStr)

	// The driver's version first: the real runtime answers it (0 when no
	// driver is installed) even when it cannot report its own.
	var v int32
	if code := call(getDrv, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("driver version", "cudaDriverGetVersion", code)
	}
	rt.driverVersion = int(v)
	v = 0
	if code := call(getRT, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("runtime version", "cudaRuntimeGetVersion", code)
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
	purego.RegisterFunc(&rt.ipcOpen, rt.ipcOpenMemHandle)
	// The first call that needs the driver and a device: a runtime that
	// reported its version can still refuse here (no device: 100), and the
	// loader should then try the next library rather than fail at open.
	v = 0
	if code := call(rt.getDeviceCount, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("count devices", "cudaGetDeviceCount", code)
	}
	return rt, nil
}

// unusable is the error of a library that loaded but cannot be used: its
// first calls failed. It wraps alloc.ErrBackendUnavailable whatever the
// code (the loader then moves on to the next candidate), names the
// library, explains the code from the driver's version, and keeps the code
// (errors.As gives the *Error).
func (rt *runtimeAPI) unusable(op, fn string, code int32) error {
	e := &Error{Op: op, Call: fn, Code: int(code), Text: rt.text(code), kind: alloc.ErrBackendUnavailable}
	rt.explain(e)
	return e
}

// explain adds, to the error of a call that found no usable driver or
// device, the library's path and what the driver's version says about it.
// Without a driver, or with one too old for it, the real runtime fails
// every call that needs the driver (cudaRuntimeGetVersion included) with 35
// (cudaErrorInsufficientDriver), and cudaDriverGetVersion reports 0 or the
// old version.
func (rt *runtimeAPI) explain(e *Error) {
	e.Op = rt.path + ": " + e.Op
	switch {
	case rt.driverVersion < 0: // cudaDriverGetVersion itself failed: nothing to add
	case rt.driverVersion == 0:
		e.why = "no CUDA driver is installed (cudaDriverGetVersion reports 0: libcuda.so.1 is missing or cannot be loaded)"
	case e.Code == errInsufficientDriver:
		e.why = driverTooOld(rt.path, rt.runtimeVersion, rt.driverVersion)
	}
}

// driverTooOld says what a runtime needs of the driver. CUDA's minor
// version compatibility holds within a major version (the real 11.8
// runtime accepts an 11.0 driver and fails with 35 on a 10.2 one), so the
// runtime needs a driver of its own major version or newer. When the
// runtime could not report its version (runtimeVersion 0), the library's
// file name tells it, if it can.
func driverTooOld(path string, runtimeVersion, driverVersion int) string {
	rv, major, from := versionString(runtimeVersion), runtimeVersion/1000, ""
	if runtimeVersion == 0 {
		rv, major = fileVersion(path)
		from = " (runtime version from the file name)"
	}
	if major == 0 || driverVersion/1000 >= major {
		return fmt.Sprintf("the driver supports CUDA %s, older than this runtime needs", versionString(driverVersion))
	}
	return fmt.Sprintf("runtime %s needs a driver for CUDA %d, driver supports %s%s", rv, major, versionString(driverVersion), from)
}

// fileVersion reads a runtime's version from its file name, following
// symlinks: "11.8" and 11 for libcudart.so.11.8.89, "13" and 13 for
// libcudart.so.13 (the soname of every 13.x), "" and 0 when the name says
// nothing (libcudart.so, or another name).
func fileVersion(path string) (string, int) {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	rest, ok := strings.CutPrefix(filepath.Base(path), "libcudart.so.")
	if !ok {
		return "", 0
	}
	parts := strings.Split(rest, ".")
	major, err := strconv.Atoi(parts[0])
	if err != nil || major == 0 {
		return "", 0
	}
	if len(parts) == 3 { // major.minor.patch: the real file, not a soname
		if _, err := strconv.Atoi(parts[1]); err == nil {
			return parts[0] + "." + parts[1], major
		}
	}
	return parts[0], major
}

// checkVersions refuses a runtime older than minRuntimeVersion, a machine
// without a driver (cudaDriverGetVersion reports 0), and a driver of an
// older major version than the runtime. The real runtime fails
// cudaRuntimeGetVersion itself in the last two cases, so these checks
// serve runtimes that report their version anyway.
func checkVersions(path string, runtimeVersion, driverVersion int) error {
	if runtimeVersion < minRuntimeVersion {
		return fmt.Errorf("%w: cuda: %s: runtime %s is older than the minimum, %s",
			alloc.ErrBackendUnavailable, path, versionString(runtimeVersion), versionString(minRuntimeVersion))
	}
	if driverVersion == 0 {
		return fmt.Errorf("%w: cuda: %s: runtime %s, but no CUDA driver is installed (cudaDriverGetVersion reports 0)",
			alloc.ErrBackendUnavailable, path, versionString(runtimeVersion))
	}
	if driverVersion/1000 < runtimeVersion/1000 {
		return fmt.Errorf("%w: cuda: %s: %s", alloc.ErrBackendUnavailable, path, driverTooOld(path, runtimeVersion, driverVersion))
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

// fail builds the typed error of a failed call. A code that means no
// usable driver or device (35 and the others mapped to
// alloc.ErrBackendUnavailable), at any step of open or later, is explained
// as the loader explains it: the library's path and the driver's version.
func (rt *runtimeAPI) fail(op, fn string, code int32) *Error {
	e := &Error{Op: op, Call: fn, Code: int(code), Text: rt.text(code)}
	if sentinelFor(e.Code) == alloc.ErrBackendUnavailable {
		rt.explain(e)
	}
	return e
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
