package gpurt

import (
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Runtime is one loaded library as the shared paths see it: its path, its
// version (the vendor's encoding), its symbols, and how to build the
// vendor's typed error for a failed call. The vendor's own runtime type
// embeds it and fills it at bind.
type Runtime struct {
	Path    string
	Version int
	Syms

	// Vendor is the runtime's table: its sentinels and its error type.
	Vendor *Vendor

	// ErrorString is the runtime's cudaGetErrorString / hipGetErrorString
	// (purego.RegisterFunc, for its string result; off the hot path).
	ErrorString func(code int32) string
	// NoText is an error's Text when ErrorString is not bound yet.
	NoText string
	// IPCOpen is the IPC open call, bound with purego.RegisterFunc for its
	// 64-byte struct argument passed by value (off the hot path), and
	// IPCOpenFlags the lazy-peer-access flag it must be given.
	IPCOpen      func(devPtr *uintptr, handle IPCMemHandle, flags uint32) int32
	IPCOpenFlags uint32

	// Explain says, for a code that means no usable driver or device, which
	// library answered (lib: its path, and its version where the vendor
	// names it) and, when the library's versions tell, why (empty
	// otherwise). Called only on failure.
	Explain func(code int) (lib, why string)
}

// Shared is rt itself: through a vendor's runtime type, which embeds
// Runtime, the part the shared paths use (Keep).
func (rt *Runtime) Shared() *Runtime { return rt }

// Keep is a Config.Load for a vendor's runtime type R: it loads the
// runtime with load and keeps it in *rt for the vendor's own calls.
func Keep[R interface{ Shared() *Runtime }](rt *R, load func() (R, error)) func() (*Runtime, error) {
	return func() (*Runtime, error) {
		r, err := load()
		if err != nil {
			return nil, err
		}
		*rt = r
		return r.Shared(), nil
	}
}

// Text is the runtime's error string for code.
func (rt *Runtime) Text(code int32) string {
	if rt.ErrorString == nil {
		return rt.NoText
	}
	return rt.ErrorString(code)
}

// Error is the vendor's typed error of a failed call, with text as its
// Text; kind, when not nil, overrides the sentinel the code maps to. A
// code that means no usable driver or device (driver.ErrBackendUnavailable)
// is explained (Explain), at any step of open or later.
func (rt *Runtime) Error(op, call string, code int32, text string, kind error) error {
	e := &CallError{Op: op, Call: call, Code: int(code), Text: text, kind: kind}
	if rt.Vendor.Sentinels.For(e.Code) == driver.ErrBackendUnavailable {
		rt.explain(e)
	}
	return rt.Vendor.Wrap(e)
}

// Unusable is the error of a library that loaded but cannot be used: its
// first calls failed. It wraps driver.ErrBackendUnavailable whatever the
// code (the loader then moves on to the next candidate), is explained, and
// keeps the code (errors.As gives the vendor's *Error).
func (rt *Runtime) Unusable(op, call string, code int32) error {
	e := &CallError{Op: op, Call: call, Code: int(code), Text: rt.Text(code), kind: driver.ErrBackendUnavailable}
	rt.explain(e)
	return rt.Vendor.Wrap(e)
}

func (rt *Runtime) explain(e *CallError) {
	lib, why := rt.Explain(e.Code)
	e.Op = lib + ": " + e.Op
	e.why = why
}

// Fail is the typed error of a failed call.
func (rt *Runtime) Fail(op, call string, code int32) error {
	return rt.Error(op, call, code, rt.Text(code), nil)
}

// FailAs is Fail with kind as the sentinel, where the call gives the code
// a more precise meaning (801 from begin capture: no graphs).
func (rt *Runtime) FailAs(kind error, op, call string, code int32) error {
	return rt.Error(op, call, code, rt.Text(code), kind)
}

// Check is nil for success (0), else the typed error.
func (rt *Runtime) Check(op, call string, code int32) error {
	if code == 0 {
		return nil
	}
	return rt.Fail(op, call, code)
}

// Query makes a binding-time call that writes one C int through its only
// argument (a version, the device count). A failure makes the library
// unusable (Unusable), so the loader tries the next one.
func (rt *Runtime) Query(op string, s Sym) (int, error) {
	var v int32
	if code := Call(s.Addr, uintptr(unsafe.Pointer(&v))); code != 0 {
		return 0, rt.Unusable(op, s.Name, code)
	}
	return int(v), nil
}

// Bound ends a bind once the symbols resolved: it binds the IPC open call
// (purego.RegisterFunc) with the flags it must be given, and counts the
// devices, the first call that needs the driver and a device: a runtime
// that reported its version can still refuse here (no device), and the
// loader then tries the next library rather than fail at open.
func (rt *Runtime) Bound(ipcOpenFlags uint32) (devices int, err error) {
	purego.RegisterFunc(&rt.IPCOpen, rt.IPCOpenMemHandle.Addr)
	rt.IPCOpenFlags = ipcOpenFlags
	return rt.Query("count devices", rt.GetDeviceCount)
}
