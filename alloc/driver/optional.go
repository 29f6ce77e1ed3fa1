package driver

// Optional interfaces. A driver implements those it can; the allocator,
// the plugin, the symmetric heap and the conformance suite look for them
// with a type assertion, and work (with less) without them.

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

// StreamPoller is a StreamIdler whose device makes progress only when the
// host looks (the cpu backend, whose streams run their work when waited
// for). StreamPoll reports, without waiting, whether the stream has nothing
// left to do, and makes the progress a GPU would have made meanwhile, on
// the calling goroutine for work that cannot block and elsewhere for work
// that can (a host function). When done, the error is the failure of work
// already run, as StreamSynchronize reports it. Same capture rules as
// StreamQuery. Like StreamIdler, a driver whose calls may hang (a plugin
// host) must not implement it.
//
// Work the poll cannot run without blocking (a host function on cpu) is
// left queued and answered with ErrWouldBlock: the allocator then makes
// the watched blocking call at once, which runs it, so such a wait costs
// one hand-off (a cpu collective is a host function: polling around a
// goroutine that ran it cost +30-140% on symheap's benchmarks).
type StreamPoller interface {
	StreamPoll(s Stream) (bool, error)
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

// MemInfoer is implemented by drivers that can tell how much of the
// device's memory is free now (cudaMemGetInfo, hipMemGetInfo; the cpu
// backend counts against its limit; a plugin asks its backend). free
// counts every user of the device: other processes, other allocators and
// the driver's own caches (a stream-ordered pool, graphs' memory), so it
// can be less than an allocator could get back. total is the driver's
// answer as it stands, which may under-report unified memory (GB10):
// DeviceInfo.TotalMemory is the corrected figure. The allocator asks it
// when an allocation runs out of memory (the error says it), for
// Snapshot and for the metrics (alloc/allocprom). It is a query, not an
// unsafe call: it does not synchronize, and the allocator makes it
// during captures too (PyTorch's caching allocator asks cudaMemGetInfo
// for its out-of-memory message, which capture-time failures reach:
// pytorch/pytorch#187795; cuda's TestGPUMemInfoDuringCapture checks a
// Global capture survives it on a GPU). A driver that cannot tell after
// all (a plugin whose backend does not implement it) fails with an error
// wrapping errors.ErrUnsupported.
type MemInfoer interface {
	MemInfo() (free, total int64, err error)
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
// export only synchronous allocations: alloc.Allocator.AllocSync) at its
// base. All three are device-wide unsafe calls: make them outside
// captures, through the guard (DeviceWide), as the symmetric heap does.
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
// alloc.Allocator.Enqueue, so a capture records the buffers the kernel
// uses and holds them until the graph is closed.
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
// mapped into it. The pool's expandable segments
// (alloc.Options.ExpandableSegments) grow on it: one reservation per
// arena, chunks mapped at its end as the pool needs them, so freed memory
// merges across what would have been segment boundaries.
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
// reservation cannot be exported (IPCMemory): allocate what you export
// with alloc.Allocator.AllocSync.
type VirtualMemory interface {
	// MapGranularity is the unit of reservations and mappings, in bytes
	// (cuMemGetAllocationGranularity's recommended granularity for the
	// device; 2 MiB on cpu, CUDA's usual value, so a pool fragments there
	// as on a device). A power of two; 0 when the driver does not offer
	// virtual memory after all (cpu off Linux, a wrapper over a driver
	// without it such as alloctest.Spy): alloc.New then refuses
	// alloc.Options.ExpandableSegments as for a driver without the interface.
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

// HostRegisterer is implemented by drivers that can pin host memory the
// caller already has (a Go slice, an mmap'ed file region):
// cudaHostRegister, hipHostRegister with the mapped flag. HostRegister
// page-locks b, so the *Async copies take it as they take HostAlloc's
// memory, and returns its device address (cudaHostGetDevicePointer,
// hipHostGetDevicePointer) for kernels; on cpu, whose device is the host,
// the address is b's own. HostUnregister takes b exactly as registered
// and unpins it once work queued that may use it is done (the runtimes'
// unregister waits). Both are unsafe calls, made only outside captures
// that forbid them. Registering memory that overlaps a registered or
// pinned range, or an empty b, fails with ErrInvalidValue. The caller
// keeps b alive and unmoved from HostRegister to HostUnregister: the
// runtime holds its address. A plugin driver does not implement it: host
// memory of the engine's process cannot be pinned by the backend's.
type HostRegisterer interface {
	HostRegister(b []byte) (DevicePtr, error)
	HostUnregister(b []byte) error
}

// ManagedMemory is implemented by drivers with managed memory
// (cudaMallocManaged, hipMallocManaged, with the global attach flag):
// memory the host and the device both reach, at one address, that the
// runtime migrates between them on demand. MallocManaged returns its
// device address and the host's view of it (on a GPU the same address;
// on cpu, whose device addresses are handles, the allocation's bytes);
// the async copies take the host view as they take pinned memory.
// FreeManaged takes the address as returned and, like Free, waits for
// queued work. Both are unsafe calls; the allocator makes MallocManaged
// only with no capture active at all (during one it hangs GB10).
//
// PrefetchManaged queues, on s, a migration of [p, p+n) of one managed
// allocation to the device, or with toHost to the host
// (cudaMemPrefetchAsync, hipMemPrefetchAsync): stream-ordered, it moves
// the bytes without changing them. Whether a capture may record it is not
// measured on a recorded device (cmd/cudatruth's prefetch cases), so the
// allocator makes it only with no capture active. A range outside one
// managed allocation fails with ErrInvalidValue. A plugin driver refuses
// all three with errors.ErrUnsupported: the backend's managed memory is
// in the backend's address space, not the engine's.
type ManagedMemory interface {
	MallocManaged(size int64) (DevicePtr, []byte, error)
	FreeManaged(p DevicePtr) error
	PrefetchManaged(p DevicePtr, n int64, toHost bool, s Stream) error
}
