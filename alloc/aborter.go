package alloc

// Aborter is an optional Driver interface for drivers that can end a stuck
// call from outside it: the plugin host kills its backend process, which
// makes the call return. When a driver call passes the watchdog's deadline,
// the allocator calls Abort with the ErrCaptureTimeout error it gives the
// caller, so the backend is torn down at the deadline instead of at the
// driver's own (usually longer) one. In-process drivers cannot be aborted
// and do not implement it.
//
// A captured function that passes WithCapture's deadline does not abort
// the driver: it may be slow in the engine's own code, not stuck in a call.
type Aborter interface {
	Abort(cause error)
}
