package hip

// IPC memory handles: device memory another process can open
// (driver.IPCMemory: Driver.IPCGetMemHandle, IPCOpenMemHandle and
// IPCCloseMemHandle, in internal/gpurt). Sharing a pool and its
// allocations is poolipc.go.
//
// hipIpcGetMemHandle exports "an existing device memory allocation created
// with hipMalloc" (hip_runtime_api.h), so the handle is for allocations
// from Malloc (alloc's AllocSync), at their base; pool allocations are not
// exportable this way (that is hipMemPoolExportPointer's job: poolipc.go).
// All calls are device-wide and potentially synchronizing: they run on the
// dev thread, and alloc's Allocator methods keep them out of captures.

// ipcOpenFlags is hipIpcMemLazyEnablePeerAccess, which hipIpcOpenMemHandle's
// flags "must be specified as": 0 in ROCm 5.x's header (5.2.3:
// "#define hipIpcMemLazyEnablePeerAccess 0"), 1 from ROCm 6.0 on.
func (rt *runtimeAPI) ipcOpenFlags() uint32 {
	if rt.Version >= version6 {
		return ipcLazyEnablePeerAccessFrom6
	}
	return ipcLazyEnablePeerAccessBefore6
}
