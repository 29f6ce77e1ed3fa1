package alloc

import "fmt"

// DevicePtr is a device address as the driver hands it out. Arithmetic on it
// (base + offset) is valid inside one allocation.
type DevicePtr uint64

// Stream is a driver stream handle, opaque to this package.
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

// Modes lists every capture mode, for tests and tools that iterate them.
var Modes = []CaptureMode{Global, ThreadLocal, Relaxed}

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
	for _, m := range Modes {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, wrapf(ErrInvalidValue, "unknown capture mode %q (want global, threadlocal or relaxed)", s)
}

// DriverCaptureStatus is what the driver reports for a stream
// (cudaStreamCaptureStatus / hipStreamCaptureStatus).
type DriverCaptureStatus int

const (
	DriverCaptureNone DriverCaptureStatus = iota
	DriverCaptureActive
	DriverCaptureInvalidated
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
	PageableMemoryAccess bool          // the device reads pageable host memory coherently (GB10, Grace)
	ComputeCapability    string        // "9.0", "12.1"; empty when the driver has none
	CaptureSafety        CaptureSafety // SafetyUnset: the allocator uses SafetyDocumented
	Profile              string        // why: "gb10", "unrecorded", "recorded:<table>", "config"
}

// MaxAlignment bounds DeviceInfo.Alignment: New refuses a driver that
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
// routing, the guard, the pool and the counters live in Allocator, once.
// This file is the whole contract a backend implements: the methods, the
// sentinel each failure must wrap (Allocator's logic depends on them), and
// the optional interfaces below.
//
// "Unsafe" below means CUDA's "potentially unsafe API call": a call that may
// synchronize implicitly. Allocator never makes one while a capture forbids
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
	StreamCaptureStatus(s Stream) (DriverCaptureStatus, error)

	// Malloc and Free are synchronous, device-wide calls (cudaMalloc,
	// cudaFree). Unsafe.
	Malloc(size int64) (DevicePtr, error)
	Free(p DevicePtr) error
	// MallocAsync and FreeAsync are stream-ordered. On a capturing stream
	// they become graph nodes; the address then belongs to the graph. On a
	// stream that is not capturing they must not invalidate another
	// stream's capture: CUDA counts them as unsafe from a thread in Global
	// interaction mode, so the cuda driver makes them in Relaxed mode
	// (docs/cuda-truth.md).
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

// Optional interfaces. A driver implements those it can; the Allocator,
// the plugin host and the conformance suite look for them with a type
// assertion, and work (with less) without them.

// HostFuncLauncher is implemented by drivers that can put a host function
// on a stream (cudaLaunchHostFunc, hipLaunchHostFunc): fn runs once the
// work queued before it is done, and work queued after it waits for it; on
// a capturing stream it becomes a host node that runs at every replay. It
// is how engines put their own host-side work, and the cpu backend its
// collectives, in stream order. fn must not call the driver (CUDA forbids
// it in host functions). A non-nil error from fn fails the stream like a
// failed kernel: the next synchronize reports it. A plugin driver cannot
// ship a Go function to its backend process and does not implement it.
type HostFuncLauncher interface {
	LaunchHostFunc(s Stream, fn func() error) error
}

// GraphMemTrimmer is implemented by drivers whose graphs cache device
// memory outside the pool (CUDA keeps memory that graph allocations
// released for later graphs, beyond the pool's release threshold, until
// cudaDeviceGraphMemTrim). TrimGraphMemory returns that memory to the OS.
// It is a device-wide unsafe call: the Allocator makes it from Trim and
// before retrying an allocation that ran out of memory, under the domain's
// gate, and never while a capture forbids unsafe calls.
type GraphMemTrimmer interface {
	TrimGraphMemory() error
}

// StreamIdler is a driver that can tell, without waiting and without
// running queued work, whether a stream has nothing left to do
// (cudaStreamQuery, hipStreamQuery; the cpu backend looks at its queue).
// Synchronize and Query ask it first, inline, and make the watched blocking
// call only when work is still queued, so an idle stream costs one
// non-blocking call instead of a hand-off to a watched goroutine. When idle,
// the error is the failure of work already done, as StreamSynchronize
// reports it. Same capture rules as StreamQuery. A driver whose every call
// may hang (a plugin host: the call crosses to another process) must not
// implement it.
type StreamIdler interface {
	StreamIdle(s Stream) (bool, error)
}

// PoolTrimmer is implemented by drivers whose stream-ordered pool keeps
// freed memory for reuse (CUDA's release threshold). TrimPool returns the
// pool's unused memory to the device (cudaMemPoolTrimTo(pool, 0)), so a
// synchronous allocation can use it. It is a device-wide unsafe call, made
// like GraphMemTrimmer's.
type PoolTrimmer interface {
	TrimPool() error
}

// Aborter is implemented by drivers that can end a stuck call from outside
// it: the plugin host kills its backend process, which makes the call
// return. When a driver call passes the watchdog's deadline, the allocator
// calls Abort with the ErrCaptureTimeout error it gives the caller, so the
// backend is torn down at the deadline instead of at the driver's own
// (usually longer) one. In-process drivers cannot be aborted and do not
// implement it.
//
// A captured function that passes WithCapture's deadline does not abort
// the driver: it may be slow in the engine's own code, not stuck in a call.
type Aborter interface {
	Abort(cause error)
}

// Usage is what a UsageReporter counts.
type Usage struct {
	Device int64 // device bytes handed out and not freed, graphs' included
	Host   int64 // pinned host bytes handed out and not freed
}

// UsageReporter is implemented by drivers that count the memory they hand
// out (cpu; plugin, when its backend does), so tests can prove that what
// the Allocator took was given back. Usage fails with an error wrapping
// errors.ErrUnsupported when the driver cannot tell after all (a plugin
// whose backend does not count).
type UsageReporter interface {
	Usage() (Usage, error)
}

// DirectSpanner is implemented by drivers whose device memory is host
// memory they can hand out (cpu), for a caller that copies the bytes
// itself (the plugin server, which shares them with the host process).
// DirectSpan is a synchronizing call with the blocking copies' rules and
// errors; it returns the bytes behind [p, p+n) once s has run everything
// queued before, and holds s at that point until release is called
// (exactly once, after the caller's copy): a blocking copy runs at its
// place in stream order.
type DirectSpanner interface {
	DirectSpan(p DevicePtr, n int64, s Stream) (span []byte, release func(), err error)
}

// IPCMemory is implemented by drivers whose device allocations can be
// opened by another process (cudaIpc*, hipIpc*), for a symmetric heap's
// handle exchange, once, before any capture. The handle is opaque and of a
// fixed size per driver, and names an allocation from Malloc (the runtimes
// export only synchronous allocations: Allocator.AllocSync) at its base.
// All three are device-wide unsafe calls: Allocator's IPC methods (ipc.go)
// make them through the guard; code holding the Driver must keep them out
// of captures itself.
type IPCMemory interface {
	IPCGetMemHandle(p DevicePtr) ([]byte, error)
	IPCOpenMemHandle(handle []byte) (DevicePtr, error)
	IPCCloseMemHandle(p DevicePtr) error
}

// KernelLauncher is implemented by drivers that run device code of this
// library's own (the symmetric heap's collectives, the examples'
// elementwise kernel; internal/kernels): cuda loads the committed PTX
// through the driver API on the runtime's primary context, hip compiles
// the source with hiprtc for the device's architecture, and the test
// fakes run the same source compiled for the host.
//
// LoadModule is a device-wide unsafe call (module load, compilation): make
// it outside captures, through the guard (DeviceWide). The driver keeps
// the module until Close. LaunchKernel is stream-ordered and capturable:
// on a capturing stream it becomes a kernel node that runs at every
// replay. params is the kernel's one by-value parameter (a struct whose
// layout the caller matches with the source); the driver copies it at the
// call, so the caller may reuse it. A kernel handle not from this
// driver's LoadModule, a grid or block of 0, a block over
// Module.MaxThreadsPerBlock or an empty params is refused with
// ErrInvalidValue before any driver call. Make launches through
// Allocator.Enqueue, so a capture records the buffers the kernel uses and
// holds them until the graph is closed.
//
// MaxActiveBlocks is how many blocks of k, at block threads each and no
// dynamic shared memory, one multiprocessor holds at once
// (cuOccupancyMaxActiveBlocksPerMultiprocessor,
// hipModuleOccupancyMaxActiveBlocksPerMultiprocessor): kernels whose
// blocks wait for each other must not launch more than that times
// Module.Multiprocessors blocks in all on the device. 0 means a block
// does not fit. A runtime without the query fails with an error wrapping
// errors.ErrUnsupported. It is a query, not an unsafe call; make it
// outside captures all the same (symheap does, at open).
type KernelLauncher interface {
	LoadModule(img ModuleImage) (*Module, error)
	LaunchKernel(k Kernel, grid, block uint32, params []byte, s Stream) error
	MaxActiveBlocks(k Kernel, block uint32) (int, error)
}

// ModuleImage is device code in the forms the drivers load.
type ModuleImage struct {
	Name    string   // for errors: "capalloc collectives"
	PTX     []byte   // cuda: PTX text (NVRTC's output)
	Source  string   // hip: self-contained HIP C++ source, for hiprtc
	Kernels []string // the kernels to look up (extern "C" names)
}

// Kernel is a loaded kernel's handle (CUfunction, hipFunction_t, or the
// fake's index).
type Kernel uintptr

// Module is a loaded ModuleImage: its kernels by name, and what a launch
// configuration needs to know of the device.
type Module struct {
	Kernels            map[string]Kernel
	MaxThreadsPerBlock int    // per block
	Multiprocessors    int    // SMs / CUs: how many blocks run at once, at least
	TimerHz            uint64 // ticks per second of the kernels' global timer
	// Device is the driver's device ordinal in this process; DeviceID
	// names the device the same way in every process of the machine (its
	// PCI bus id, "domain:bus:device.function"), "" where the runtime
	// cannot say. Ranks that share a device share its multiprocessors.
	Device   int
	DeviceID string
}

// PeerAccess is implemented by drivers whose kernels can reach another
// device's memory in the same process once peer access is enabled
// (cudaDeviceCanAccessPeer / cudaDeviceEnablePeerAccess; hip's
// equivalents). Device is the driver's ordinal. CanAccessPeer reports
// whether this device can reach peer's memory at all (a query).
// EnablePeerAccess makes peer's memory, present and future, reachable
// from this device's kernels and copies; already enabled is success. It
// is device-wide and unsafe: make it outside captures, through the guard
// (DeviceWide). A runtime without the calls fails both with an error
// wrapping errors.ErrUnsupported.
type PeerAccess interface {
	Device() int
	CanAccessPeer(peer int) (bool, error)
	EnablePeerAccess(peer int) error
}

// VirtualMemory is implemented by drivers that can reserve a range of
// device addresses and back parts of it with physical memory on demand:
// CUDA's virtual memory management (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, cuMemUnmap, cuMemRelease), HIP's hipMem*
// equivalents, and on cpu (Linux) a PROT_NONE reservation with memfd chunks
// mapped into it. The pool's expandable segments (Options.ExpandableSegments)
// grow on it: one reservation per arena, chunks mapped at its end as the
// pool needs them, so freed memory merges across what would have been
// segment boundaries.
//
// A driver type may have these methods and still not offer them at run
// time (hip without the hipMem* symbols, cpu off Linux or with supplied
// device memory): then MapGranularity returns 0 and every other method
// fails with ErrBackendUnavailable, so a caller probes with MapGranularity
// and falls back to ordinary segments. The plugin host driver does not
// implement VirtualMemory at all: a reservation lives in one process's
// address space, and the plugin shares device memory across processes.
//
// Every method is synchronous and device-wide unsafe (mapping may
// synchronize the device): the Allocator makes them only outside captures,
// through the guard. A range is mapped and unmapped whole: UnmapMemory
// takes exactly the ptr and size of one earlier MapMemory call (CUDA
// cannot unmap part of a mapping), and ReleaseAddress a whole reservation
// with nothing mapped in it. Sizes and offsets are multiples of
// MapGranularity; anything else is refused with ErrInvalidValue before any
// driver call, as is mapping over a mapped range. Mapped memory reads and
// writes like Malloc's (Memset, copies, kernels, across chunk boundaries
// too) and counts in the device's memory use; it starts zeroed on cpu
// only. An operation on reserved memory that is not mapped fails with
// ErrInvalidValue on cpu; on a GPU it is a device fault, so the caller
// unmaps only memory that no queued work still uses (cpu's UnmapMemory
// lets queued work finish first, as its Free does). Memory of a
// reservation cannot be exported (IPCMemory): the Allocator refuses it.
type VirtualMemory interface {
	// MapGranularity is the unit of reservations and mappings, in bytes
	// (cuMemGetAllocationGranularity's recommended granularity for the
	// device; 2 MiB on cpu, CUDA's usual value, so a pool fragments there
	// as on a device). A power of two; 0 when the driver does not offer
	// virtual memory after all (cpu off Linux, a wrapper over a driver
	// without it such as alloctest.Spy): New then refuses
	// Options.ExpandableSegments as for a driver without the interface.
	MapGranularity() int64
	// ReserveAddress reserves size bytes of address space with no memory
	// behind it. Reserving more than the device has is expected.
	ReserveAddress(size int64) (DevicePtr, error)
	// ReleaseAddress gives back a whole reservation.
	ReleaseAddress(base DevicePtr, size int64) error
	// MapMemory backs [p, p+size), inside a reservation and not mapped,
	// with new physical memory, readable and writable by the device (and,
	// on cpu, the host). Out of memory wraps ErrOutOfMemory and maps
	// nothing.
	MapMemory(p DevicePtr, size int64) error
	// UnmapMemory unmaps one MapMemory range and releases its memory.
	UnmapMemory(p DevicePtr, size int64) error
}
