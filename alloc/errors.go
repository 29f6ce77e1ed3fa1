package alloc

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Sentinels an engine matches with errors.Is; every error this package
// returns wraps one (sometimes two) of them together with the operation's
// context. Each is the alloc/driver sentinel of the same name (drivers wrap
// them too, so errors.Is matches whichever side made the error); the
// driver-level ones (driver.ErrCaptureIllegalOp, driver.ErrDriver,
// driver.ErrBackendUnavailable, ...) are documented there.
var (
	// ErrCaptureIncompatibleAllocation: the operation cannot be made part of
	// the active capture (an eager allocation, a pageable copy, any data
	// operation during a capture this allocator did not start). No driver
	// call was made.
	ErrCaptureIncompatibleAllocation = driver.ErrCaptureIncompatibleAllocation
	// ErrSyncDuringCapture: a synchronize or query was refused because a
	// capture forbids it. The capture stays valid.
	ErrSyncDuringCapture = driver.ErrSyncDuringCapture
	// ErrCaptureInvalidated: the driver reports the capture as invalidated.
	ErrCaptureInvalidated = driver.ErrCaptureInvalidated
	// ErrCaptureTimeout: the watchdog's deadline passed; the stuck call or
	// captured function is abandoned, not cancelled.
	ErrCaptureTimeout   = driver.ErrCaptureTimeout
	ErrNotCapturing     = driver.ErrNotCapturing
	ErrAlreadyCapturing = driver.ErrAlreadyCapturing
	// ErrOutOfMemory: the device cannot hold the allocation, after the
	// reclaim ladder. The message says the request, the allocator, the
	// device's total and free memory, what the allocator holds, its
	// largest free block and a hint (docs/device-memory.md, "Out of memory").
	ErrOutOfMemory = driver.ErrOutOfMemory
	// ErrInvalidBuffer: double free, a buffer from another allocator, a
	// view freed as if it owned its memory, a buffer of a closed graph.
	ErrInvalidBuffer = driver.ErrInvalidBuffer
	ErrInvalidSize   = driver.ErrInvalidSize
	ErrOutOfRange    = driver.ErrOutOfRange
	ErrMisaligned    = driver.ErrMisaligned
	ErrInvalidValue  = driver.ErrInvalidValue
	// ErrClosed: use of a closed allocator, graph or host buffer.
	ErrClosed = driver.ErrClosed
	// ErrLeaked: Close found buffers, host buffers or graphs still alive; it
	// released them and reports what they were.
	ErrLeaked = driver.ErrLeaked
)

// ErrHistoryFileRefused: Options.HistoryFile names something the
// allocator will not replace or write into: a target that is not a
// regular file (a device, a FIFO, a symlink, a directory), or a directory
// that is a symlink, belongs to another user, or that others may write to
// without the sticky bit (docs/security.md). It wraps ErrInvalidValue.
var ErrHistoryFileRefused = fmt.Errorf("%w: history file refused", ErrInvalidValue)

// Error is the context wrapper around a sentinel: which operation, on which
// backend, with what size, in which capture state.
type Error struct {
	Op      string
	Backend string
	Size    int64 // bytes involved, -1 when not meaningful
	State   CaptureState
	Err     error
}

func (e *Error) Error() string {
	s := "capalloc"
	if e.Backend != "" {
		s += " " + e.Backend
	}
	s += ": " + e.Op
	if _, says := e.Err.(*oomError); e.Size >= 0 && !says { // an oomError says the size itself
		s += fmt.Sprintf("(%d B)", e.Size)
	}
	s += " [capture=" + e.State.String() + "]: " + e.Err.Error()
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// wrapf wraps a sentinel with a formatted detail.
func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
