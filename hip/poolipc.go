package hip

import "github.com/capalloc/capalloc/internal/gpurt"

// Sharing a pool and its allocations with another process
// (hip_runtime_api.h, ROCm 5.2.3; the calls are marked beta there):
//
//	hipMemPoolExportToShareableHandle(void *shared_handle, hipMemPool_t mem_pool,
//	        hipMemAllocationHandleType handle_type, unsigned int flags)
//	hipMemPoolImportFromShareableHandle(hipMemPool_t *mem_pool, void *shared_handle,
//	        hipMemAllocationHandleType handle_type, unsigned int flags)
//	hipMemPoolExportPointer(hipMemPoolPtrExportData *export_data, void *dev_ptr)
//	hipMemPoolImportPointer(void **dev_ptr, hipMemPool_t mem_pool, hipMemPoolPtrExportData *export_data)
//
// The exporter opens with ipc=true (its pool created with
// hipMemHandleTypePosixFileDescriptor), sends ExportPool's file descriptor
// to the importer (over a Unix socket, or as an inherited descriptor), and
// ExportPointer's 64 bytes for each allocation from MallocAsync. The
// importer calls ImportPool once and ImportedPool.ImportPointer per
// allocation. For a POSIX descriptor the export writes an int through
// shared_handle, and the import takes the descriptor by value, cast to a
// pointer (CUDA's programming guide shows both for the CUDA calls these
// mirror). The header says the imported memory must be freed in every
// importer before the exporter frees it. All calls are device-wide and
// potentially synchronizing: they run on the dev thread; keep them out of
// captures. Checked only against the fake: not run on an AMD GPU.

// ptrExportDataSize is sizeof(hipMemPoolPtrExportData): unsigned char
// reserved[64] (hip_runtime_api.h).
const ptrExportDataSize = 64

var (
	_ [ptrExportDataSize - gpurt.PtrExportDataSize]struct{}
	_ [gpurt.PtrExportDataSize - ptrExportDataSize]struct{}
)

// ImportedPool is a pool another process exported, opened in this one
// (Driver.ImportPool, hipMemPoolImportFromShareableHandle). It makes no
// allocations of its own ("imported memory pools do not support creating
// new allocations"); it imports the exporter's: ImportPointer
// (hipMemPoolImportPointer), FreePointer (hipFree, which the header allows
// for imported memory), Close (hipMemPoolDestroy). The export side is
// Driver.ExportPool (hipMemPoolExportToShareableHandle with
// hipMemHandleTypePosixFileDescriptor) and Driver.ExportPointer
// (hipMemPoolExportPointer).
type ImportedPool = gpurt.ImportedPool
