package cuda

import "github.com/capalloc/capalloc/internal/gpurt"

// Sharing a pool and its allocations with another process, as in the hip
// package (cuda_runtime_api.h, CUDA 11.2+; signatures from the bindgen
// output of cuda_runtime_api.h on docs.rs and CUDA's programming guide,
// section "IPC memory pools"; no CUDA header on this machine):
//
//	cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
//	        enum cudaMemAllocationHandleType handleType, unsigned int flags)
//	cudaMemPoolImportFromShareableHandle(cudaMemPool_t *memPool, void *shareableHandle,
//	        enum cudaMemAllocationHandleType handleType, unsigned int flags)
//	cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)
//	cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool, struct cudaMemPoolPtrExportData *exportData)
//
// The exporter opens with ipc=true (its pool created with
// cudaMemHandleTypePosixFileDescriptor), sends ExportPool's file
// descriptor and ExportPointer's 64 bytes per allocation; the importer
// calls ImportPool once and ImportedPool.ImportPointer per allocation. The
// export writes an int through shareableHandle; the import takes the
// descriptor by value, cast to a pointer (the programming guide: "Note
// that the handle is passed by value here"). All calls are device-wide and
// potentially synchronizing: they run on the dev thread; keep them out of
// captures. Checked only against the fake: not run on a GPU yet.

// ptrExportDataSize is sizeof(struct cudaMemPoolPtrExportData): unsigned
// char reserved[64].
const ptrExportDataSize = 64

var (
	_ [ptrExportDataSize - gpurt.PtrExportDataSize]struct{}
	_ [gpurt.PtrExportDataSize - ptrExportDataSize]struct{}
)

// ImportedPool is a pool another process exported, opened in this one
// (Driver.ImportPool). It makes no allocations of its own; it imports the
// exporter's: ImportPointer (cudaMemPoolImportPointer), FreePointer
// (cudaFree, which cudaMemPoolImportPointer's documentation allows), Close
// (cudaMemPoolDestroy). The export side is Driver.ExportPool
// (cudaMemPoolExportToShareableHandle with
// cudaMemHandleTypePosixFileDescriptor) and Driver.ExportPointer
// (cudaMemPoolExportPointer).
type ImportedPool = gpurt.ImportedPool
