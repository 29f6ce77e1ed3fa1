package driver

import "errors"

// Sentinels. Match them with errors.Is; every error this module returns
// wraps one (sometimes two) of them together with the operation's context.
// A driver wraps the one its Driver method's documentation names; the
// others are the allocator's (package alloc re-exports those an engine
// matches, as the same values), declared here too so that a driver that
// carries errors across a process boundary (backends/plugin) can name
// every one.
var (
	// ErrCaptureIncompatibleAllocation: the operation cannot be made part of
	// the active capture (an eager allocation, a pageable copy, any data
	// operation during a capture this allocator did not start). No driver
	// call was made.
	ErrCaptureIncompatibleAllocation = errors.New("operation is incompatible with stream capture")
	// ErrSyncDuringCapture: a synchronize or query was refused because a
	// capture forbids it. The capture stays valid.
	ErrSyncDuringCapture = errors.New("synchronization refused during stream capture")
	// ErrCaptureInvalidated: the driver reports the capture as invalidated.
	ErrCaptureInvalidated = errors.New("stream capture invalidated")
	// ErrCaptureTimeout: the watchdog's deadline passed; the stuck call or
	// captured function is abandoned, not cancelled.
	ErrCaptureTimeout   = errors.New("capture or driver call exceeded its deadline")
	ErrNotCapturing     = errors.New("stream is not capturing")
	ErrAlreadyCapturing = errors.New("stream is already capturing")
	// ErrCaptureIllegalOp: a call was refused because a capture was
	// active: by the driver (CUDA 900, 906, 907), or by this module before
	// any driver call (a device-wide call during a Global-mode capture, see
	// DeviceWide). A driver refusal may or may not have invalidated the
	// capture (CUDA's 900 does not always): the allocator reads the
	// driver's status again after it, and the error also wraps
	// ErrCaptureInvalidated when the capture is gone. A refusal made before
	// the driver leaves the capture valid.
	ErrCaptureIllegalOp = errors.New("operation not permitted while stream is capturing")
	// ErrCaptureWrongThread: a Global or ThreadLocal capture was ended on
	// another OS thread than the one that began it (CUDA 908,
	// cudaErrorStreamCaptureWrongThread). The capture is not invalidated by
	// this: it is still recording and must be ended on its own thread.
	// Errors wrapping it also wrap ErrCaptureIllegalOp.
	ErrCaptureWrongThread = errors.New("capture must be ended on the thread that began it")
	// ErrCaptureUnavailable: the driver cannot capture graphs at all.
	ErrCaptureUnavailable = errors.New("stream capture not supported by driver")
	// ErrOutOfMemory: memory exhausted. The allocator's error says what
	// it holds and what the device has (docs/device-memory.md, "Out of
	// memory"); a driver's says what it was asked for.
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrInvalidBuffer: double free, a buffer from another allocator, a
	// view freed as if it owned its memory, a buffer of a closed graph.
	ErrInvalidBuffer = errors.New("invalid buffer")
	ErrInvalidSize   = errors.New("invalid size")
	ErrOutOfRange    = errors.New("offset or length out of range")
	ErrMisaligned    = errors.New("misaligned offset")
	ErrInvalidValue  = errors.New("invalid value")
	// ErrNotExportable: an IPC export of memory that cannot be shared
	// with another process (a buffer of an expandable segment).
	ErrNotExportable = errors.New("buffer cannot be exported")
	// ErrClosed: use of a closed allocator, graph or host buffer.
	ErrClosed = errors.New("use after close")
	// ErrLeaked: Close found buffers, host buffers or graphs still alive; it
	// released them and reports what they were.
	ErrLeaked = errors.New("resources leaked at close")
	// ErrBackendUnavailable: the backend's library or device is missing; the
	// message says what was searched.
	ErrBackendUnavailable = errors.New("backend unavailable")
	// ErrBackendCrashed: the backend's process (plugin mode) died; the
	// message carries its exit status. Every call after it fails the same
	// way: reopen the backend or move down the chain.
	ErrBackendCrashed = errors.New("backend process crashed")
	// ErrBackendHung: a call to the backend's process passed its deadline
	// and the process was killed; the message names the call and deadline.
	ErrBackendHung = errors.New("backend call hung; backend process killed")
	// ErrDriver: any other driver failure; the message keeps the driver's
	// code and text.
	ErrDriver = errors.New("driver error")
	// ErrWouldBlock is StreamPoll's answer when what is queued can run only
	// in a blocking call (StreamSynchronize or StreamQuery).
	ErrWouldBlock = errors.New("stream work can run only in a blocking call")
)
