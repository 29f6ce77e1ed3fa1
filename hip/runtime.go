package hip

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

// runtimeAPI is one loaded libamdhip64: its version and resolved symbols.
// Calls go through purego.SyscallN on the cached address (no reflection,
// no allocation on the hot path); only hipGetErrorString (a string
// result) and hipIpcOpenMemHandle (a 64-byte struct by value), both off
// the hot path, use purego.RegisterFunc.
type runtimeAPI struct {
	path           string
	runtimeVersion int // major*10^7 + minor*10^5 + patch (HIP_VERSION's encoding)
	devices        int // hipGetDeviceCount at load
	errorString    func(code int32) string
	ipcOpen        func(devPtr *uintptr, handle ipcMemHandle, flags uint32) int32
	symbols
}

// bind reads the version of the library at path, resolves its symbols and
// probes for a device once.
//
// Not used: hipDriverGetVersion, which in ROCm reports the HIP version
// again (50221153 from Debian's 5.2.3 on a machine without any GPU or
// kernel driver), so it cannot tell "no driver" from "driver present".
// Without a GPU the runtime answers hipRuntimeGetVersion, fails
// hipGetDeviceCount with 100 (hipErrorNoDevice) and most other calls with
// 101 (hipErrorInvalidDevice); it neither hangs nor prints.
func bind(path string, h uintptr) (*runtimeAPI, error) {
	rt := &runtimeAPI{path: path}
	var getRT, getStr uintptr
	for _, b := range []binding{
		{"hipRuntimeGetVersion", &getRT, false},
		{"hipGetErrorString", &getStr, false},
	} {
		addr, err := purego.Dlsym(h, b.name)
		if err != nil || addr == 0 {
			return nil, fmt.Errorf("%w: hip: %s: not a HIP runtime: no symbol %s", alloc.ErrBackendUnavailable, path, b.name)
		}
		*b.addr = addr
	}
	purego.RegisterFunc(&rt.errorString, getStr)

	var v int32
	if code := call(getRT, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("runtime version", "hipRuntimeGetVersion", code)
	}
	rt.runtimeVersion = int(v)
	if err := resolve(h, path, rt.bindings()); err != nil {
		return nil, err
	}
	purego.RegisterFunc(&rt.ipcOpen, rt.ipcOpenMemHandle)
	// The one device probe: the loader moves on to the next library when
	// this one sees no device.
	v = 0
	if code := call(rt.getDeviceCount, uintptr(unsafe.Pointer(&v))); code != 0 {
		return nil, rt.unusable("count devices", "hipGetDeviceCount", code)
	}
	rt.devices = int(v)
	if v == 0 {
		return nil, rt.unusable("count devices", "hipGetDeviceCount", errNoDevice)
	}
	return rt, nil
}

// unusable is the error of a library that loaded but cannot be used. It
// wraps alloc.ErrBackendUnavailable whatever the code (the loader then
// moves on), names the library and its version, and keeps the code
// (errors.As gives the *Error).
func (rt *runtimeAPI) unusable(op, fn string, code int32) error {
	e := &Error{Op: op, Call: fn, Code: int(code), Text: rt.text(code), kind: alloc.ErrBackendUnavailable}
	rt.explain(e)
	return e
}

// explain adds the library, its version and, for no device, what that
// means, to the error of a call that found no usable device.
func (rt *runtimeAPI) explain(e *Error) {
	v := "version unknown"
	if rt.runtimeVersion > 0 {
		v = "HIP runtime " + versionString(rt.runtimeVersion)
	}
	e.Op = fmt.Sprintf("%s (%s): %s", rt.path, v, e.Op)
	if e.Code == errNoDevice {
		e.why = "no AMD GPU is visible to this runtime (no /dev/kfd, no amdgpu kernel driver, or HIP_VISIBLE_DEVICES hides them)"
	}
}

// Capture of pool allocations as graph nodes arrived in ROCm 5.5 and
// auto-free-on-launch in 5.6; before, hipMallocAsync inside a capture
// allocates at once and the graph does not own the memory. Capture with
// pools, the contract alloc is built on, needs 5.6.
const (
	minCaptureVersion = 50600000
	version6          = 60000000
)

// checkCaptureVersion refuses a runtime too old to capture with pools,
// unless the caller gave up capture (no_capture).
func checkCaptureVersion(rt *runtimeAPI, noCapture bool) error {
	if noCapture || rt.runtimeVersion >= minCaptureVersion {
		return nil
	}
	return fmt.Errorf("%w: hip: %s: HIP runtime %s is older than %s: it cannot capture pool allocations into graphs (graph allocation nodes arrived in ROCm 5.5, auto-free-on-launch in 5.6; before, hipMallocAsync in a capture allocates at once); open with no_capture=true to use it without graphs",
		alloc.ErrBackendUnavailable, rt.path, versionString(rt.runtimeVersion), versionString(minCaptureVersion))
}

// call invokes a C function returning hipError_t. go:uintptrescapes keeps
// the objects behind uintptr(unsafe.Pointer(p)) arguments alive and in
// place for the duration of the call.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r1, _, _ := purego.SyscallN(fn, args...)
	return int32(r1) // hipError_t is a C enum (int): the upper half is garbage
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
// (hipStreamIsCapturing before every pool hit; the async allocs, frees,
// copies, memsets and launches). The slice handed to SyscallN is the
// pooled frame's array and an out-parameter is the frame's slot (outArg).
// callHot must not be given a pointer to a Go stack variable, only outArg,
// device addresses, C memory or heap memory the caller keeps alive.
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
	e := &Error{Op: op, Call: fn, Code: int(code), Text: rt.text(code)}
	if sentinelFor(e.Code) == alloc.ErrBackendUnavailable {
		rt.explain(e)
	}
	return e
}

// check is nil for hipSuccess, else the typed error.
func (rt *runtimeAPI) check(op, fn string, code int32) error {
	if code == 0 {
		return nil
	}
	return rt.fail(op, fn, code)
}

func (rt *runtimeAPI) text(code int32) string {
	if rt.errorString == nil {
		return ""
	}
	return rt.errorString(code)
}

// first is callHot's code, for calls without an out-parameter.
func first(code int32, _ uint64) int32 { return code }

// versionString renders HIP_VERSION's encoding (hip_version.h:
// major*10000000 + minor*100000 + patch): 50221153 is "5.2.21153".
func versionString(v int) string {
	return fmt.Sprintf("%d.%d.%d", v/10000000, v%10000000/100000, v%100000)
}
