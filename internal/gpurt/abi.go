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
