package gpurt

import "unsafe"

// ABI shared by both runtimes, each layout checked at compile time. The
// vendor packages' abi.go cite their own headers for it:
// struct cudaMemPoolProps (driver_types.h) and struct hipMemPoolProps
// (hip_runtime_api.h) are the same 88 bytes,
//
//	enum allocType;                    // 4
//	enum handleTypes;                  // 4
//	struct { enum type; int id; } location; // 8
//	void *win32SecurityAttributes;     // 8
//	unsigned char reserved[64];        // CUDA 11.x, ROCm 5.x
//
// and both later carved fields (maxSize, usage) out of the same 64 tail
// bytes, so an all-zero tail means "defaults" in every version.
type MemPoolProps struct {
	AllocType               int32
	HandleTypes             int32
	LocationType            int32
	LocationID              int32
	Win32SecurityAttributes uintptr
	Tail                    [64]byte
}

// IPCHandleSize is CUDA_IPC_HANDLE_SIZE and HIP_IPC_HANDLE_SIZE.
const IPCHandleSize = 64

// IPCMemHandle is cudaIpcMemHandle_t / hipIpcMemHandle_t: struct {
// char reserved[64]; }, taken by value by the IPC open call, so it is bound
// with purego.RegisterFunc, which passes it as the platform's C ABI does
// (on the stack on amd64, by reference on arm64).
type IPCMemHandle struct {
	Reserved [IPCHandleSize]byte
}

// The enums and flags HIP took over from CUDA with CUDA's values: each
// constant is the value both runtimes' headers give it, cited by both
// names (CUDA: driver_types.h and cuda_runtime_api.h of CUDA 11.x/12.x; HIP:
// /usr/include/hip/driver_types.h and hip_runtime_api.h of Debian's ROCm
// 5.2.3, which hip's TestSharedABIMatchesHeader reads). A runtime that
// numbers one differently gets a Vendor field for it, as the device
// attributes have. Each is typed as the shared paths use it: uintptr when
// passed as a call's argument, int32 when compared with, or stored as, a C
// int.
const (
	// cudaMemcpyKind, hipMemcpyKind (driver_types.h).
	MemcpyHostToDevice   uintptr = 1 // cudaMemcpyHostToDevice, hipMemcpyHostToDevice
	MemcpyDeviceToHost   uintptr = 2 // cudaMemcpyDeviceToHost, hipMemcpyDeviceToHost
	MemcpyDeviceToDevice uintptr = 3 // cudaMemcpyDeviceToDevice, hipMemcpyDeviceToDevice

	// cudaStreamCaptureStatus (driver_types.h), hipStreamCaptureStatus
	// (hip_runtime_api.h), as the is-capturing call reports it.
	CaptureStatusNone        int32 = 0
	CaptureStatusActive      int32 = 1
	CaptureStatusInvalidated int32 = 2

	// cudaStreamCaptureMode (driver_types.h), hipStreamCaptureMode
	// (hip_runtime_api.h). driver.CaptureMode has the same order, but the
	// mapping is spelled out (Vendor.CaptureMode) so a change on either
	// side is caught by the tests.
	CaptureModeGlobal      uintptr = 0
	CaptureModeThreadLocal uintptr = 1
	CaptureModeRelaxed     uintptr = 2

	// Flags (#defines, and enum cudaGraphInstantiateFlags and
	// hipGraphInstantiateFlags).
	HostAllocPortable                uintptr = 0x01 // cudaHostAllocPortable, hipHostMallocPortable: pinned for every context
	HostRegisterPortable             uintptr = 0x01 // cudaHostRegisterPortable, hipHostRegisterPortable: registered for every context
	HostRegisterMapped               uintptr = 0x02 // cudaHostRegisterMapped (cuda-python MemHostRegisterFlags DEVICEMAP), hipHostRegisterMapped (hip_runtime_api.h 5.2.3): mapped into the device's address space (hostreg.go)
	StreamNonBlocking                uintptr = 0x01 // cudaStreamNonBlocking, hipStreamNonBlocking
	GraphInstantiateAutoFreeOnLaunch uintptr = 1    // cudaGraphInstantiateFlagAutoFreeOnLaunch (CUDA 11.4+), hipGraphInstantiateFlagAutoFreeOnLaunch

	// cudaMemPoolAttr, hipMemPoolAttr: the value is a 64-bit unsigned.
	MemPoolAttrReleaseThreshold uintptr = 0x4 // cudaMemPoolAttrReleaseThreshold, hipMemPoolAttrReleaseThreshold

	// cudaMemAllocationType, cudaMemAllocationHandleType,
	// cudaMemLocationType (driver_types.h) and their hip names
	// (hip_runtime_api.h).
	MemAllocationTypePinned int32 = 0x1 // cudaMemAllocationTypePinned, hipMemAllocationTypePinned
	MemHandleTypeNone       int32 = 0x0 // cudaMemHandleTypeNone, hipMemHandleTypeNone
	MemHandleTypePosixFD    int32 = 0x1 // cudaMemHandleTypePosixFileDescriptor, hipMemHandleTypePosixFileDescriptor
	MemLocationTypeDevice   int32 = 1   // cudaMemLocationTypeDevice, hipMemLocationTypeDevice
	MemLocationTypeHost     int32 = 2   // cudaMemLocationTypeHost (a CUDA 13 prefetch's location; id ignored)
)

// Managed memory (managed.go): cudaMemAttachGlobal (driver_types.h
// #define 0x01), hipMemAttachGlobal (hip_runtime_api.h 5.2.3, #define
// 0x01): reachable from any stream of any device; cudaCpuDeviceId and
// hipCpuDeviceId (both ((int)-1)): the host as a pre-13 prefetch's device.
const (
	MemAttachGlobal uintptr = 0x01
	CPUDeviceID     int32   = -1
)

// PtrExportDataSize is sizeof(cudaMemPoolPtrExportData) and
// sizeof(hipMemPoolPtrExportData): unsigned char reserved[64].
const PtrExportDataSize = 64

// The layouts are part of the ABI: checked at compile time.
var (
	_ [88 - unsafe.Sizeof(MemPoolProps{})]struct{}
	_ [unsafe.Sizeof(MemPoolProps{}) - 88]struct{}
	_ [24 - unsafe.Offsetof(MemPoolProps{}.Tail)]struct{}
	_ [unsafe.Offsetof(MemPoolProps{}.Tail) - 24]struct{}
	_ [64 - unsafe.Sizeof(IPCMemHandle{})]struct{}
	_ [unsafe.Sizeof(IPCMemHandle{}) - 64]struct{}
)
