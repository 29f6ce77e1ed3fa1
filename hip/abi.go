package hip

import "unsafe"

// ABI facts of the HIP runtime, each taken from the headers Debian's
// libamdhip64-dev 5.2.3 installs (/usr/include/hip/hip_runtime_api.h and
// /usr/include/hip/driver_types.h), never from memory; where a later ROCm
// changed a fact, the comment says so and the code handles both. Enums are
// C ints (4 bytes); handles (hipStream_t, hipMemPool_t, hipGraph_t,
// hipGraphExec_t) are pointers.

// hipMemcpyKind (driver_types.h: enum hipMemcpyKind).
const (
	memcpyHostToDevice   = 1
	memcpyDeviceToHost   = 2
	memcpyDeviceToDevice = 3
)

// hipStreamCaptureStatus (hip_runtime_api.h), as hipStreamIsCapturing
// reports it.
const (
	captureStatusNone        = 0
	captureStatusActive      = 1
	captureStatusInvalidated = 2
)

// hipStreamCaptureMode (hip_runtime_api.h). alloc.CaptureMode has the same
// order; the mapping is spelled out so a change on either side is caught.
const (
	captureModeGlobal      = 0
	captureModeThreadLocal = 1
	captureModeRelaxed     = 2
)

// Flags (hip_runtime_api.h #defines and enum hipGraphInstantiateFlags).
const (
	hostMallocPortable               = 0x1  // hipHostMallocPortable
	hostRegisterPortable             = 0x1  // hipHostRegisterPortable
	streamNonBlocking                = 0x01 // hipStreamNonBlocking
	graphInstantiateAutoFreeOnLaunch = 1    // hipGraphInstantiateFlagAutoFreeOnLaunch
)

// hipMemPoolAttr (hip_runtime_api.h): the value is a uint64_t.
const memPoolAttrReleaseThreshold = 0x4

// hipDeviceAttribute_t (hip_runtime_api.h) numbers its attributes in its
// own order, not CUDA's: the values below were printed by a C program
// compiled against the installed header (hipDeviceAttributeIntegrated 16,
// hipDeviceAttributeMemoryPoolsSupported 88; CUDA's are 18 and 115).
const (
	devAttrIntegrated           = 16
	devAttrMemoryPoolsSupported = 88
)

// hipMemAllocationType, hipMemAllocationHandleType, hipMemLocationType
// (hip_runtime_api.h).
const (
	memAllocationTypePinned        = 0x1
	memHandleTypeNone              = 0x0
	memHandleTypePosixFD           = 0x1 // hipMemHandleTypePosixFileDescriptor
	memLocationTypeDevice          = 1
	deviceNameLen                  = 256 // buffer given to hipDeviceGetName
	ipcHandleSize                  = 64  // HIP_IPC_HANDLE_SIZE
	ipcLazyEnablePeerAccessBefore6 = 0   // hipIpcMemLazyEnablePeerAccess in ROCm 5.x headers
	ipcLazyEnablePeerAccessFrom6   = 1   // ... and from ROCm 6.0 on (issue 9; not in the installed 5.2.3 header)
)

// memPoolProps is struct hipMemPoolProps (hip_runtime_api.h, 5.2.3):
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
type memPoolProps struct {
	allocType               int32
	handleTypes             int32
	locationType            int32
	locationID              int32
	win32SecurityAttributes uintptr
	tail                    [64]byte
}

// ipcMemHandle is hipIpcMemHandle_t (hip_runtime_api.h: struct
// hipIpcMemHandle_st { char reserved[HIP_IPC_HANDLE_SIZE]; }, 64 bytes).
// hipIpcOpenMemHandle takes it by value: purego's struct support passes it
// as the C ABI says (on the stack on amd64, by reference on arm64).
type ipcMemHandle struct {
	reserved [ipcHandleSize]byte
}

// The layouts are part of the ABI: checked at compile time.
var (
	_ [88 - unsafe.Sizeof(memPoolProps{})]struct{}
	_ [unsafe.Sizeof(memPoolProps{}) - 88]struct{}
	_ [24 - unsafe.Offsetof(memPoolProps{}.tail)]struct{}
	_ [unsafe.Offsetof(memPoolProps{}.tail) - 24]struct{}
	_ [64 - unsafe.Sizeof(ipcMemHandle{})]struct{}
	_ [unsafe.Sizeof(ipcMemHandle{}) - 64]struct{}
)
