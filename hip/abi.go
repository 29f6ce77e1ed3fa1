package hip

import "github.com/capalloc/capalloc/internal/gpurt"

// ABI facts of the HIP runtime, each taken from the headers Debian's
// libamdhip64-dev 5.2.3 installs (/usr/include/hip/hip_runtime_api.h and
// /usr/include/hip/driver_types.h), never from memory; where a later ROCm
// changed a fact, the comment says so and the code handles both. Enums are
// C ints (4 bytes); handles (hipStream_t, hipMemPool_t, hipGraph_t,
// hipGraphExec_t) are pointers.

// The enums and flags HIP took over from CUDA with CUDA's values (memcpy
// kinds, capture status and mode, the portable and non-blocking flags,
// auto-free-on-launch, the pool's release threshold attribute, the pool
// properties' enums) are internal/gpurt's constants, each cited there by
// its HIP and CUDA names; TestSharedABIMatchesHeader checks them against
// the installed header.

// hipDeviceAttribute_t (hip_runtime_api.h) numbers its attributes in its
// own order, not CUDA's: the values below were printed by a C program
// compiled against the installed header (hipDeviceAttributeIntegrated 16,
// hipDeviceAttributeMemoryPoolsSupported 88, MaxThreadsPerBlock 56,
// MultiprocessorCount 63; CUDA's are 18, 115, 1 and 16).
const (
	devAttrIntegrated           = 16
	devAttrMemoryPoolsSupported = 88
	devAttrMaxThreadsPerBlock   = 56 // hipDeviceAttributeMaxThreadsPerBlock
	devAttrMultiprocessorCount  = 63 // hipDeviceAttributeMultiprocessorCount
	// The safety profile's, printed the same way:
	// hipDeviceAttributeComputeCapabilityMajor 23, ...Minor 61,
	// hipDeviceAttributePageableMemoryAccess 65,
	// hipDeviceAttributePageableMemoryAccessUsesHostPageTables 66 (the
	// member after it, in 5.2.3's header and ROCm 6's).
	devAttrComputeCapabilityMajor = 23
	devAttrComputeCapabilityMinor = 61
	devAttrPageableMemoryAccess   = 65
	devAttrHostPageTables         = 66
)

// devAttrWallClockRate is hipDeviceAttributeWallClockRate ("constant
// frequency of wall clock in kilohertz", the rate of wall_clock64(), which
// the kernels' bounded waits read): 10017, after the 17 AMD-specific
// attributes from 10000 that 5.2.3's header lists, as ROCm 6's header has
// it (docs.rs cubecl-hip-sys, bindgen of hip_runtime_api.h). 5.2.3's
// header lacks it ("the interface to query the frequency will be
// implemented", amd_device_functions.h): a runtime that refuses it cannot
// time the kernels' waits, and LoadModule says so.
const devAttrWallClockRate = 10017

// hipDeviceProp_t's gcnArchName (char[256]), the architecture hiprtc
// compiles the kernels for. Two layouts: ROCm 5's hipDeviceProp_t, from
// hipGetDeviceProperties (gcnArchName at 396 of 792 bytes: printed by a C
// program compiled against 5.2.3's header), and ROCm 6's
// hipDeviceProp_tR0600, from hipGetDevicePropertiesR0600 (at 1160 of 1472
// bytes: LLVM's offload-arch reads it there, clang/tools/offload-arch/
// AMDGPUArchByHIP.cpp, llvm-project PR 167695). ROCm 6's header maps
// hipGetDeviceProperties to the R0600 call, but its library still exports
// the plain name with the old layout, so the driver asks R0600 when the
// library has it and the plain name otherwise. The buffer is larger than
// either struct.
const (
	propsBufSize     = 8 << 10
	propsR0000ArchAt = 396
	propsR0600ArchAt = 1160
	gcnArchNameLen   = 256
)

// Sizes and the IPC open flag (hip_runtime_api.h).
const (
	deviceNameLen                  = 256 // buffer given to hipDeviceGetName
	ipcHandleSize                  = 64  // HIP_IPC_HANDLE_SIZE
	ipcLazyEnablePeerAccessBefore6 = 0   // hipIpcMemLazyEnablePeerAccess in ROCm 5.x headers
	ipcLazyEnablePeerAccessFrom6   = 1   // ... and from ROCm 6.0 on (ROCm 6's hip_runtime_api.h; not in the installed 5.2.3 one)
)

// memPoolProps is struct hipMemPoolProps (hip_runtime_api.h, 5.2.3), the
// layout gpurt.MemPoolProps declares and checks at compile time:
//
//	hipMemAllocationType       allocType;               // 4
//	hipMemAllocationHandleType handleTypes;             // 4
//	hipMemLocation { hipMemLocationType type; int id; } location; // 8
//	void *win32SecurityAttributes;                      // 8
//	unsigned char reserved[64];                         // "must be 0"
//
// 88 bytes, the tail from offset 24. ROCm 6.2 carved `size_t maxSize` out
// of the same tail (at 24), so an all-zero tail means "defaults" in every
// version.
//
// ipcMemHandle is hipIpcMemHandle_t (hip_runtime_api.h: struct
// hipIpcMemHandle_st { char reserved[HIP_IPC_HANDLE_SIZE]; }, 64 bytes),
// gpurt.IPCMemHandle. hipIpcOpenMemHandle takes it by value: purego's
// struct support passes it as the C ABI says (on the stack on amd64, by
// reference on arm64).
type ipcMemHandle = gpurt.IPCMemHandle

var (
	_ [ipcHandleSize - gpurt.IPCHandleSize]struct{}
	_ [gpurt.IPCHandleSize - ipcHandleSize]struct{}
)

// vendor is this package's table for the shared runtime layer: the values
// above where HIP's numbering or behaviour is its own, and its errors
// (errors.go).
var vendor = gpurt.Vendor{
	Name:                          "hip",
	Alignment:                     Alignment,
	DevAttrIntegrated:             devAttrIntegrated,
	DevAttrMaxThreadsPerBlock:     devAttrMaxThreadsPerBlock,
	DevAttrMultiprocessorCount:    devAttrMultiprocessorCount,
	DevAttrComputeCapabilityMajor: devAttrComputeCapabilityMajor,
	DevAttrComputeCapabilityMinor: devAttrComputeCapabilityMinor,
	DevAttrPageableMemoryAccess:   devAttrPageableMemoryAccess,
	DevAttrHostPageTables:         devAttrHostPageTables,
	// One pool serves captures and exports (CUDA's 801 for graph
	// allocations from an exportable pool is not known of ROCm).
	SeparateCapturePool: false,
	IPCHandleType:       "hipIpcMemHandle_t",
	PtrExportDataType:   "hipMemPoolPtrExportData",
	MissingHostFuncNote: " (Debian's 5.2.3 does not, although its header declares it)",
	Sentinels:           sentinels,
	Wrap:                func(e *gpurt.CallError) error { return (*Error)(e) },
}
