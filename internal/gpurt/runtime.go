package gpurt

// Runtime is one loaded library as the shared paths see it: its path, its
// version (the vendor's encoding), its symbols, and how to build the
// vendor's typed error for a failed call. The vendor's own runtime type
// embeds it and fills it at bind.
type Runtime struct {
	Path    string
	Version int
	Syms

	// ErrorString is the runtime's cudaGetErrorString / hipGetErrorString
	// (purego.RegisterFunc, for its string result; off the hot path).
	ErrorString func(code int32) string
	// IPCOpen is the IPC open call, bound with purego.RegisterFunc for its
	// 64-byte struct argument passed by value (off the hot path), and
	// IPCOpenFlags the lazy-peer-access flag it must be given.
	IPCOpen      func(devPtr *uintptr, handle IPCMemHandle, flags uint32) int32
	IPCOpenFlags uint32

	// NewError builds the vendor's error for a failed call; kind, when not
	// nil, overrides the sentinel the code maps to. Called only on
	// failure.
	NewError func(op, call string, code int32, kind error) error
}

// Fail is the typed error of a failed call.
func (rt *Runtime) Fail(op, call string, code int32) error { return rt.NewError(op, call, code, nil) }

// FailAs is Fail with kind as the sentinel, where the call gives the code
// a more precise meaning (801 from begin capture: no graphs).
func (rt *Runtime) FailAs(kind error, op, call string, code int32) error {
	return rt.NewError(op, call, code, kind)
}

// Check is nil for success (0), else the typed error.
func (rt *Runtime) Check(op, call string, code int32) error {
	if code == 0 {
		return nil
	}
	return rt.NewError(op, call, code, nil)
}
