package cuda

import "github.com/capalloc/capalloc/internal/gpurt"

// Virtual memory (driver.VirtualMemory) through CUDA's virtual memory
// management, in the driver API (libcuda, like the module calls:
// driverapi.go), on the runtime's primary context of the device, made
// current before the calls. Signatures (cuda.h, CUDA 10.2 onwards, none
// versioned with a _v2; CUdeviceptr is an unsigned 64-bit integer,
// CUmemGenericAllocationHandle an unsigned long long):
//
//	cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
//	        CUmemAllocationGranularity_flags option)
//	cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
//	        unsigned long long flags)
//	cuMemAddressFree(CUdeviceptr ptr, size_t size)
//	cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
//	        const CUmemAllocationProp *prop, unsigned long long flags)
//	cuMemRelease(CUmemGenericAllocationHandle handle)
//	cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
//	        unsigned long long flags)
//	cuMemUnmap(CUdeviceptr ptr, size_t size)
//	cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
//
// The structs, with natural C alignment on the 64-bit targets:
//
//	CUmemLocation       { CUmemLocationType type; int id; }                          // 8 B
//	CUmemAllocationProp { CUmemAllocationType type;                   // at 0
//	                      CUmemAllocationHandleType requestedHandleTypes;  // at 4
//	                      CUmemLocation location;                     // at 8 (type), 12 (id)
//	                      void *win32HandleMetaData;                  // at 16, must be 0 off Windows
//	                      struct { unsigned char compressionType, gpuDirectRDMACapable;
//	                               unsigned short usage; unsigned char reserved[4]; } allocFlags;  // at 24
//	                    }                                                            // 32 B
//	CUmemAccessDesc     { CUmemLocation location; CUmemAccess_flags flags; }         // 12 B
//
// (CUDA 10.2's prop had "unsigned long long reserved" where allocFlags is:
// the same 8 zero bytes.) Enum values: CU_MEM_ALLOCATION_TYPE_PINNED = 1,
// CU_MEM_HANDLE_TYPE_NONE = 0, CU_MEM_LOCATION_TYPE_DEVICE = 1,
// CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
// CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1.
//
// Checked against NVIDIA's driver API reference (Virtual Memory
// Management: the signatures; CUmemAccessDesc_v1, CUmemLocation_v1;
// cuMemUnmap: "The range must be the entire contiguous address range that
// was mapped to", and a new mapping "will need to have access granted
// through cuMemSetAccess"), cuda-python's driver bindings
// (MemAllocationGranularityFlags RECOMMENDED 1, MemAccessFlags READWRITE
// 3) and the struct as bindgen and docs.rs crates give it (cuda-driver-sys,
// kn-cuda-sys: type, requestedHandleTypes, location, win32HandleMetaData,
// allocFlags), not against an installed cuda.h: this machine has none.
const (
	cuMemAllocationTypePinned        = 1
	cuMemLocationTypeDevice          = 1
	cuMemAccessFlagsProtReadWrite    = 3
	cuMemAllocGranularityRecommended = 1
)

// virtualMemory is the driver's gpurt.Config.VirtualMemory. It runs on the
// dev thread, once: without the driver API, or without its calls (a driver
// older than 10.2), the driver offers no virtual memory, and says why.
func (d *Driver) virtualMemory(*gpurt.Setup) (*gpurt.VMAPI, error) {
	a, ctx, release, err := d.primary()
	if err != nil {
		return nil, err
	}
	return &gpurt.VMAPI{
		Granularity: a.memGranularity, Reserve: a.memAddressReserve, Free: a.memAddressFree,
		Create: a.memCreate, Release: a.memRelease, Map: a.memMap, Unmap: a.memUnmap, SetAccess: a.memSetAccess,
		Lib:               a.path,
		GranularityOption: cuMemAllocGranularityRecommended,
		Prop:              gpurt.AllocationProp(cuMemAllocationTypePinned, cuMemLocationTypeDevice, d.opts.Device),
		Access:            gpurt.AccessDesc(cuMemLocationTypeDevice, d.opts.Device, cuMemAccessFlagsProtReadWrite),
		SetCurrent:        a.ctxSetCurrent,
		Current:           ctx,
		Check:             a.check,
		Close:             release,
	}, nil
}
