package hip

import (
	"encoding/binary"
	"fmt"

	"github.com/capalloc/capalloc/internal/gpurt"
)

// Virtual memory (driver.VirtualMemory) through HIP's hipMem* calls, from
// the runtime library (symbols.go lists them), on the dev thread, where
// the driver's device is current. Every one is in 5.2.3's header and
// library (symbol version hip_5.1); a library without any of them makes
// the driver offer no virtual memory (MapGranularity 0, and the other
// methods fail with driver.ErrBackendUnavailable naming what is missing).
//
// hipMemAllocationProp's layout changed in ROCm 5.3, so the driver builds
// the one of the loaded runtime's version. Before 5.3
// (/usr/include/hip/hip_runtime_api.h, 5.2.3, and HIP's 5.2.1/5.2.3
// reference):
//
//	struct { unsigned char compressionType;                  // at 0
//	         hipMemLocation location;                        // at 4 (type), 8 (id)
//	         hipMemAllocationHandleType requestedHandleType; // at 12
//	         hipMemAllocationType type;                      // at 16
//	         unsigned short usage;                           // at 20
//	         void *win32HandleMetaData; }                    // at 24; 32 B
//
// from 5.3 (HIP's reference for 5.3.2, 5.4.4, 6.4.2 and latest; CUDA's
// layout):
//
//	struct { hipMemAllocationType type;                       // at 0
//	         hipMemAllocationHandleType requestedHandleType;  // at 4 (a union with requestedHandleTypes in 6.x)
//	         hipMemLocation location;                         // at 8 (type), 12 (id)
//	         void *win32HandleMetaData;                       // at 16
//	         struct { unsigned char compressionType, gpuDirectRDMACapable;
//	                  unsigned short usage; } allocFlags; }   // at 24; 32 B
//
// 5.3.0 and 5.3.1 are taken to have the new layout with 5.3.2 (not
// checked: no header of theirs here). hipMemLocation is { hipMemLocationType
// type; int id; } and hipMemAccessDesc { hipMemLocation location;
// hipMemAccessFlags flags; } (12 B) in every version. Enum values (5.2.3's
// header, unchanged since): hipMemAllocationTypePinned = 1,
// hipMemHandleTypeNone = 0, hipMemLocationTypeDevice = 1,
// hipMemAccessFlagsProtReadWrite = 3,
// hipMemAllocationGranularityRecommended = 1.
//
// Not verified on an AMD GPU (none here): the fake runtime checks the
// layout of the version it reports.
const (
	hipMemAllocationPropSize          = 32
	hipMemAccessFlagsProtReadWrite    = 3
	hipMemAllocGranularityRecommended = 1
	// propLayoutVersion is the first HIP_VERSION with the new layout.
	propLayoutVersion = 50300000
)

// allocationProp is hipMemAllocationProp for pinned memory on device dev,
// with no export handle types, in the layout of runtime version version.
func allocationProp(version, dev int) []byte {
	if version >= propLayoutVersion {
		return gpurt.AllocationProp(gpurt.MemAllocationTypePinned, gpurt.MemLocationTypeDevice, dev)
	}
	b := make([]byte, hipMemAllocationPropSize)
	binary.NativeEndian.PutUint32(b[4:], uint32(gpurt.MemLocationTypeDevice))
	binary.NativeEndian.PutUint32(b[8:], uint32(dev))
	binary.NativeEndian.PutUint32(b[16:], uint32(gpurt.MemAllocationTypePinned))
	return b
}

// virtualMemory is the driver's gpurt.Config.VirtualMemory. It runs on the
// dev thread, once; gpurt refuses it, naming what the library lacks, when a
// call is missing.
func (d *Driver) virtualMemory(*gpurt.Setup) (*gpurt.VMAPI, error) {
	rt := d.rt
	return &gpurt.VMAPI{
		Granularity: rt.memGranularity, Reserve: rt.memAddressReserve, Free: rt.memAddressFree,
		Create: rt.memCreate, Release: rt.memRelease, Map: rt.memMap, Unmap: rt.memUnmap, SetAccess: rt.memSetAccess,
		Lib:               fmt.Sprintf("%s (HIP runtime %s)", rt.Path, versionString(rt.Version)),
		GranularityOption: hipMemAllocGranularityRecommended,
		Prop:              allocationProp(rt.Version, d.opts.Device),
		Access:            gpurt.AccessDesc(gpurt.MemLocationTypeDevice, d.opts.Device, hipMemAccessFlagsProtReadWrite),
		Check:             rt.Check,
	}, nil
}
