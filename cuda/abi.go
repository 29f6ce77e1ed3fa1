package cuda

import (
	"unsafe"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// ABI facts of the CUDA runtime, each taken from NVIDIA's headers
// (driver_types.h, cuda_runtime_api.h of CUDA 11.x/12.x), never from memory.
// Enums are C ints (4 bytes); handles (cudaStream_t, cudaMemPool_t,
// cudaGraph_t, cudaGraphExec_t) are pointers.

// The enums and flags HIP shares with CUDA (memcpy kinds, capture status
// and mode, the portable and non-blocking flags, auto-free-on-launch, the
// pool's release threshold attribute, the pool properties' enums) are
// internal/gpurt's constants, each cited there by its CUDA and HIP names.

// cudaDeviceAttr (driver_types.h; the values also checked against the
// bindgen output of docs.rs cuda-runtime-sys: cudaDevAttrMaxThreadsPerBlock
// = 1, cudaDevAttrMultiProcessorCount = 16, cudaDevAttrIntegrated = 18).
const (
	devAttrMaxThreadsPerBlock   = 1
	devAttrMultiProcessorCount  = 16
	devAttrIntegrated           = 18
	devAttrMemoryPoolsSupported = 115
	// The safety profile's (CUDA Runtime API reference, enum
	// cudaDeviceAttr): cudaDevAttrComputeCapabilityMajor = 75,
	// cudaDevAttrComputeCapabilityMinor = 76,
	// cudaDevAttrPageableMemoryAccess = 88,
	// cudaDevAttrPageableMemoryAccessUsesHostPageTables = 100 (the same
	// in every cudaDeviceAttr from 11.4 to 13.0: docs/abi-audit.md).
	devAttrComputeCapabilityMajor = 75
	devAttrComputeCapabilityMinor = 76
	devAttrPageableMemoryAccess   = 88
	devAttrHostPageTables         = 100
)

// globalTimerHz is the rate of PTX's %globaltimer, which the kernels'
// bounded waits read: it counts nanoseconds (PTX ISA, special registers).
const globalTimerHz = 1_000_000_000

// IPC (cuda_runtime_api.h, driver_types.h): cudaIpcMemHandle_t is
// struct cudaIpcMemHandle_st { char reserved[CUDA_IPC_HANDLE_SIZE]; } with
// CUDA_IPC_HANDLE_SIZE 64, taken by value by cudaIpcOpenMemHandle, whose
// flags must be cudaIpcMemLazyEnablePeerAccess (0x01). Checked against the
// bindgen output of cuda_runtime_api.h (docs.rs cuda-runtime-sys,
// rcudnn-sys: reserved: [i8; 64]; cudaIpcOpenMemHandle(devPtr: *mut *mut
// c_void, handle: cudaIpcMemHandle_t, flags: c_uint)) and cuda-python's
// IpcMemFlags (IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1), not against an
// installed CUDA header: this machine has none.
const (
	ipcHandleSize           = 64
	ipcLazyEnablePeerAccess = 0x01
)

// memPoolProps is struct cudaMemPoolProps (driver_types.h), the layout
// gpurt.MemPoolProps declares and checks at compile time:
//
//	enum cudaMemAllocationType       allocType;    // 4
//	enum cudaMemAllocationHandleType handleTypes;  // 4
//	struct cudaMemLocation { enum type; int id; } location; // 8
//	void *win32SecurityAttributes;                 // 8
//	unsigned char reserved[64];                    // CUDA 11.2-11.x
//
// CUDA 12 carved `size_t maxSize; unsigned short usage; unsigned char
// reserved[54];` out of the same 64 tail bytes, so the struct is 88 bytes in
// every version and an all-zero tail means "defaults" in every version.
// cudaIpcMemHandle_t is gpurt.IPCMemHandle (64 bytes, checked there too).
var _ [ipcHandleSize - gpurt.IPCHandleSize]struct{}
var _ [gpurt.IPCHandleSize - ipcHandleSize]struct{}

// vendor is this package's table for the shared runtime layer: the values
// above where CUDA's numbering or behaviour is its own, and its errors
// (errors.go).
var vendor = gpurt.Vendor{
	Name:                          "cuda",
	Alignment:                     Alignment,
	DevAttrIntegrated:             devAttrIntegrated,
	DevAttrMaxThreadsPerBlock:     devAttrMaxThreadsPerBlock,
	DevAttrMultiprocessorCount:    devAttrMultiProcessorCount,
	DevAttrComputeCapabilityMajor: devAttrComputeCapabilityMajor,
	DevAttrComputeCapabilityMinor: devAttrComputeCapabilityMinor,
	DevAttrPageableMemoryAccess:   devAttrPageableMemoryAccess,
	DevAttrHostPageTables:         devAttrHostPageTables,
	// An exportable pool cannot serve graph allocations (801 in a
	// capture, measured on an H100).
	SeparateCapturePool: true,
	IPCHandleType:       "cudaIpcMemHandle_t",
	PtrExportDataType:   "cudaMemPoolPtrExportData",
	Sentinels:           sentinels,
	Wrap:                func(e *gpurt.CallError) error { return (*Error)(e) },
}

// devicePropsBufSize bounds struct cudaDeviceProp (about 1 KiB in CUDA 12);
// only its leading fields are read, so the buffer is generous rather than
// exact and survives layout changes between versions.
//
// The leading fields are the same in every runtime this package accepts
// (struct cudaDeviceProp in driver_types.h of 11.4-11.8, 12.0-12.9 and
// 13.0, as the bindgen output of each carries it):
//
//	char         name[256];          // offset 0
//	cudaUUID_t   uuid;               // 256: struct { char bytes[16]; }
//	char         luid[8];            // 272
//	unsigned int luidDeviceNodeMask; // 280
//	size_t       totalGlobalMem;     // 288 (284 rounded up to size_t's 8)
//
// The struct grew and lost fields later on (12.0 added reserved tails,
// 13.0 dropped deprecated clock fields), never before totalGlobalMem.
const (
	devicePropsBufSize = 8 << 10
	deviceNameLen      = 256
)

// devicePropPrefix mirrors those leading fields; totalGlobalMem is read at
// its offset.
type devicePropPrefix struct {
	_              [256]byte // name (read from the buffer's start)
	_              [16]byte  // uuid
	_              [8]byte   // luid
	_              uint32    // luidDeviceNodeMask
	totalGlobalMem uint64    // size_t
}

const devicePropTotalGlobalMemAt = unsafe.Offsetof(devicePropPrefix{}.totalGlobalMem)

// The offset is part of the ABI (288 on linux/amd64 and linux/arm64):
// checked at compile time.
var (
	_ [288 - devicePropTotalGlobalMemAt]struct{}
	_ [devicePropTotalGlobalMemAt - 288]struct{}
)
