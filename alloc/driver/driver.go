package driver

import "fmt"

// DevicePtr is a device address as the driver hands it out. Arithmetic on it
// (base + offset) is valid inside one allocation.
type DevicePtr uint64

// Stream is a driver stream handle, opaque to the allocator.
type Stream uintptr

// GraphHandle is a captured (not yet instantiated) graph.
type GraphHandle uintptr

// GraphExec is an instantiated, launchable graph.
type GraphExec uintptr

// CaptureMode is the stream capture mode, with CUDA's meaning
// (cudaStreamCaptureMode): it decides which other calls a capture forbids.
type CaptureMode int

const (
	// Global: while the capture is active, potentially unsafe calls are
	// refused on this stream and, process wide, from every allocator whose
	// interaction mode is Global.
	Global CaptureMode = iota
	// ThreadLocal: unsafe calls are refused only on the capturing stream.
	ThreadLocal
	// Relaxed: unsafe calls that do not touch the capturing stream (an eager
	// synchronous allocation, say) are allowed; calls on the capturing stream
	// that would synchronize it are still refused.
	Relaxed
)

// Modes returns every capture mode, for tests and tools that iterate
// them; the slice is the caller's.
func Modes() []CaptureMode { return []CaptureMode{Global, ThreadLocal, Relaxed} }

func (m CaptureMode) String() string {
	switch m {
	case Global:
		return "global"
	case ThreadLocal:
		return "threadlocal"
	case Relaxed:
		return "relaxed"
	}
	return "invalid"
}

// ParseCaptureMode accepts the names String returns.
func ParseCaptureMode(s string) (CaptureMode, error) {
	for _, m := range Modes() {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown capture mode %q (want global, threadlocal or relaxed)", ErrInvalidValue, s)
}

// CaptureStatus is what the driver reports for a stream
// (cudaStreamCaptureStatus / hipStreamCaptureStatus).
type CaptureStatus int

const (
	CaptureNone CaptureStatus = iota
	CaptureActive
	CaptureInvalidated
)

// DeviceInfo describes the device behind a driver.
type DeviceInfo struct {
	Name          string
	TotalMemory   int64 // bytes of device memory the driver can hand out
	Alignment     int64 // guaranteed alignment of every allocation, a power of two up to MaxAlignment
	UnifiedMemory bool  // host and device share physical memory (GB10, CPU)

	// The device's safety profile (docs/capture-safety.md), classified by
	// the driver at open: ClassifySafety's verdict unless the backend
	// config's capture_safety overrides it.
	Integrated           bool          // cudaDevAttrIntegrated / hipDeviceAttributeIntegrated
	PageableMemoryAccess bool          // reads pageable host memory coherently: in place (ATS) or through HMM's mirror of the page tables, which may migrate pages to device memory
	HostPageTables       bool          // with PageableMemoryAccess: that access is in place, through the host's page tables (ATS: GB10, Grace)
	ComputeCapability    string        // "9.0", "12.1"; empty when the driver has none
	CaptureSafety        CaptureSafety // SafetyUnset: the allocator uses SafetyDocumented
	Profile              string        // why: "gb10", "unrecorded", "recorded:<table>", "config"
}

// ReadsHostInPlace reports whether the device reads pageable host memory
// where it lies, through the host's page tables (ATS: GB10, Grace): what
// MapHost needs to hand out a host address with no registration.
// Pageable access through HMM does not count: its reads may migrate the
// pages.
func (i DeviceInfo) ReadsHostInPlace() bool {
	return i.PageableMemoryAccess && i.HostPageTables
}

// MaxAlignment bounds DeviceInfo.Alignment: alloc.New refuses a driver that
// reports more, or anything but a power of two (a driver in a plugin child
// is not trusted to, and the pool's rounding needs one).
const MaxAlignment = 1 << 30

// CheckAlignment reports whether a is a power of two in [1, MaxAlignment],
// wrapping ErrDriver when it is not.
func CheckAlignment(a int64) error {
	if a <= 0 || a > MaxAlignment || a&(a-1) != 0 {
		return fmt.Errorf("%w: device alignment %d is not a power of two in [1, %d]", ErrDriver, a, int64(MaxAlignment))
	}
	return nil
}

// Driver is the thin vendor layer: primitives only, no policy. All capture
// routing, the guard, the pool and the counters live in alloc.Allocator,
// once. The package documentation says what else a backend implements.
//
// "Unsafe" below means CUDA's "potentially unsafe API call": a call that may
// synchronize implicitly. The allocator never makes one while a capture forbids
// it; a driver that receives one anyway must refuse it with an error wrapping
// ErrCaptureIllegalOp and invalidate the affected capture, as CUDA does.
//
// Host memory passed to the *Async copies must come from HostAlloc (pinned);
// a captured copy reads or writes those bytes at every replay, never a
// snapshot. The blocking copies take pageable memory.
//
// Errors, for every method: after Close, ErrClosed; a bad pointer, stream,
// graph or size, ErrInvalidValue; memory exhausted, ErrOutOfMemory (the
// pool's give-back-and-retry relies on it); a call a capture forbids,
// ErrCaptureIllegalOp (and ErrCaptureInvalidated when the capture is
// gone); a library or device that cannot be used, ErrBackendUnavailable;
// anything else the vendor reports, ErrDriver with its code and name.
// Every method must be safe for concurrent use.
type Driver interface {
	// Name is the backend name ("cpu", "cuda", "hip").
	Name() string
	Info() DeviceInfo
	// CaptureDomain names the set of streams whose Global-mode captures
	// affect each other: one per process for CUDA/HIP, one per driver
	// instance for the CPU emulation.
	CaptureDomain() string
	// Close releases everything the driver holds; later calls fail with
	// ErrClosed. It must not invalidate another driver's capture
	// (AfterGlobalCaptures).
	Close() error

	CreateStream() (Stream, error)
	DestroyStream(s Stream) error
	// StreamSynchronize blocks until all work on s is done, reporting
	// the failure of work queued on s. Unsafe.
	StreamSynchronize(s Stream) error
	// StreamQuery reports whether all work on s is done. Unsafe.
	StreamQuery(s Stream) (bool, error)
	// StreamCaptureStatus is always legal (cudaStreamIsCapturing); the
	// Allocator trusts it over its own records.
	StreamCaptureStatus(s Stream) (CaptureStatus, error)

	// Malloc and Free are synchronous, device-wide calls (cudaMalloc,
	// cudaFree). Unsafe. Out of memory, Malloc fails (ErrOutOfMemory) at
	// once, without waiting for queued frees or trying again: the
	// allocator's reclaim ladder decides what to give back and when to
	// retry. Memory whose stream-ordered free has not run is not free for
	// it (a CUDA pool keeps it: PoolTrimmer).
	Malloc(size int64) (DevicePtr, error)
	Free(p DevicePtr) error
	// MallocAsync and FreeAsync are stream-ordered. On a capturing stream
	// they become graph nodes; the address then belongs to the graph. On a
	// stream that is not capturing they must not invalidate another
	// stream's capture: CUDA counts them as unsafe from a thread in Global
	// interaction mode, so the cuda driver makes them in Relaxed mode
	// (docs/cuda-truth.md). Outside capture, MallocAsync may reuse at once
	// the memory of frees queued on s (CUDA's stream-ordered reuse); out
	// of memory it fails without running the queue or trying again.
	MallocAsync(size int64, s Stream) (DevicePtr, error)
	FreeAsync(p DevicePtr, s Stream) error

	// HostAlloc returns pinned host memory; HostFree releases it. Unsafe.
	HostAlloc(size int64) ([]byte, error)
	HostFree(b []byte) error

	CopyHtoDAsync(dst DevicePtr, src []byte, s Stream) error
	CopyDtoHAsync(dst []byte, src DevicePtr, s Stream) error
	CopyDtoDAsync(dst, src DevicePtr, n int64, s Stream) error
	MemsetAsync(dst DevicePtr, value byte, n int64, s Stream) error
	// CopyHtoD returns once src may be reused; CopyDtoH returns once dst
	// holds the bytes. Both run at their place in s's order (after work
	// queued before, before work queued after, whichever goroutine queues
	// it) and take pageable memory. Unsafe.
	CopyHtoD(dst DevicePtr, src []byte, s Stream) error
	CopyDtoH(dst []byte, src DevicePtr, s Stream) error

	// BeginCapture fails with ErrCaptureUnavailable when the driver cannot
	// capture at all. The Allocator bounds it (and EndCapture) with its
	// watchdog and makes it without holding its own lock.
	BeginCapture(s Stream, mode CaptureMode) error
	// EndCapture ends the capture on s. For an invalidated capture it
	// returns an error wrapping ErrCaptureInvalidated and no graph; the
	// allocations made during it are released by the driver. Ending on
	// another thread than the one that began a Global or ThreadLocal
	// capture is ErrCaptureWrongThread (drivers pin that thread).
	EndCapture(s Stream) (GraphHandle, error)
	// GraphInstantiate makes a launchable graph. autoFree asks that
	// allocations the graph does not free itself be freed at the next launch
	// (cudaGraphInstantiateFlagAutoFreeOnLaunch).
	// Like MallocAsync, it must not invalidate another stream's capture.
	GraphInstantiate(g GraphHandle, autoFree bool) (GraphExec, error)
	// GraphLaunch on a capturing stream fails with ErrCaptureIllegalOp and
	// invalidates the capture, as cudaGraphLaunch does in every mode: a
	// launch is never recorded as a child graph.
	GraphLaunch(e GraphExec, s Stream) error
	// GraphExecDestroy must not invalidate another stream's capture.
	GraphExecDestroy(e GraphExec) error
	// GraphDestroy releases the graph and the memory of allocations it also
	// freed. An allocation the graph did not free belongs to the graph until
	// a launch materializes it: if the graph was never launched, destroy
	// releases it; once launched, it stays valid (past destroy) until the
	// caller frees it with FreeAsync, as in CUDA.
	GraphDestroy(g GraphHandle) error
}
