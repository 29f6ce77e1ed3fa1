package hip

import "github.com/capalloc/capalloc/internal/gpurt"

// Signatures bound here, each as /usr/include/hip/hip_runtime_api.h
// (ROCm 5.2.3) declares it; every function returns hipError_t, a C enum:
//
//	hipRuntimeGetVersion(int *runtimeVersion)
//	const char *hipGetErrorString(hipError_t hipError)
//	hipGetDeviceCount(int *count)
//	hipSetDevice(int deviceId)
//	hipDeviceGetAttribute(int *pi, hipDeviceAttribute_t attr, int deviceId)
//	hipDeviceGetName(char *name, int len, hipDevice_t device)   // hipDevice_t is int
//	hipDeviceTotalMem(size_t *bytes, hipDevice_t device)
//	hipMemGetInfo(size_t *free, size_t *total)
//	hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags, int priority)
//	hipStreamDestroy(hipStream_t stream)
//	hipStreamSynchronize(hipStream_t stream)
//	hipStreamQuery(hipStream_t stream)                 // 600 = hipErrorNotReady
//	hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus)
//	hipMalloc(void **ptr, size_t size)
//	hipFree(void *ptr)
//	hipMemPoolCreate(hipMemPool_t *mem_pool, const hipMemPoolProps *pool_props)
//	hipMemPoolDestroy(hipMemPool_t mem_pool)
//	hipDeviceGetDefaultMemPool(hipMemPool_t *mem_pool, int device)
//	hipMemPoolSetAttribute(hipMemPool_t mem_pool, hipMemPoolAttr attr, void *value)
//	hipMemPoolTrimTo(hipMemPool_t mem_pool, size_t min_bytes_to_hold)
//	hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData)  // optional; hipHostFn_t: void (*)(void *userData)
//	hipMallocFromPoolAsync(void **dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream)
//	hipFreeAsync(void *dev_ptr, hipStream_t stream)
//	hipHostMalloc(void **ptr, size_t size, unsigned int flags)
//	hipHostFree(void *ptr)
//	hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags)
//	hipHostUnregister(void *hostPtr)
//	hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind, hipStream_t stream)
//	hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream)
//	hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode)
//	hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph)
//	hipGraphInstantiateWithFlags(hipGraphExec_t *pGraphExec, hipGraph_t graph, unsigned long long flags)
//	hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream)
//	hipGraphExecDestroy(hipGraphExec_t graphExec)
//	hipGraphDestroy(hipGraph_t graph)
//	hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode *mode)
//	hipIpcGetMemHandle(hipIpcMemHandle_t *handle, void *devPtr)
//	hipIpcOpenMemHandle(void **devPtr, hipIpcMemHandle_t handle, unsigned int flags)  // handle by value
//	hipIpcCloseMemHandle(void *devPtr)
//	hipMemPoolExportToShareableHandle(void *shared_handle, hipMemPool_t mem_pool,
//	        hipMemAllocationHandleType handle_type, unsigned int flags)
//	hipMemPoolImportFromShareableHandle(hipMemPool_t *mem_pool, void *shared_handle,
//	        hipMemAllocationHandleType handle_type, unsigned int flags)
//	hipMemPoolExportPointer(hipMemPoolPtrExportData *export_data, void *dev_ptr)
//	hipMemPoolImportPointer(void **dev_ptr, hipMemPool_t mem_pool, hipMemPoolPtrExportData *export_data)
//	hipDeviceGraphMemTrim(int device)                  // optional: not in 5.2.3's header
//
// and, optional (LoadModule fails without them, saying which; the rest of
// the driver works), for the kernels (module.go):
//
//	hipGetDevice(int *deviceId)
//	hipGetDeviceProperties(hipDeviceProp_t *prop, int deviceId)  // ROCm 5's layout, in every version's library
//	hipGetDevicePropertiesR0600(hipDeviceProp_tR0600 *prop, int deviceId)  // ROCm 6+ (abi.go)
//	hipModuleLoadData(hipModule_t *module, const void *image)
//	hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *kname)
//	hipModuleUnload(hipModule_t module)
//	hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
//	        unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
//	        unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
//	        void **kernelParams, void **extra)
//	hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, hipFunction_t f,
//	        int blockSize, size_t dynSharedMemPerBlk)  // driver.KernelLauncher's MaxActiveBlocks
//
// and, optional, for the ranks' device identity and peer access
// (internal/gpurt/topology.go):
//
//	hipDeviceGetPCIBusId(char *pciBusId, int len, int device)
//	hipDeviceCanAccessPeer(int *canAccessPeer, int deviceId, int peerDeviceId)
//	hipDeviceEnablePeerAccess(int peerDeviceId, unsigned int flags)  // 704 hipErrorPeerAccessAlreadyEnabled
//
// and, optional, for virtual memory (vm.go; hipMemGenericAllocationHandle_t
// is a pointer, struct ihipMemGenericAllocationHandle *):
//
//	hipMemGetAllocationGranularity(size_t *granularity, const hipMemAllocationProp *prop,
//	        hipMemAllocationGranularity_flags option)
//	hipMemAddressReserve(void **ptr, size_t size, size_t alignment, void *addr, unsigned long long flags)
//	hipMemAddressFree(void *devPtr, size_t size)
//	hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
//	        const hipMemAllocationProp *prop, unsigned long long flags)
//	hipMemRelease(hipMemGenericAllocationHandle_t handle)
//	hipMemMap(void *ptr, size_t size, size_t offset, hipMemGenericAllocationHandle_t handle,
//	        unsigned long long flags)
//	hipMemUnmap(void *ptr, size_t size)
//	hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc, size_t count)
//
// Deliberately not bound: hipGraphInstantiate (its log-buffer
// parameters), hipStreamGetCaptureInfo (changed across versions): capture
// status comes from hipStreamIsCapturing only. The device's name and
// total memory come from hipDeviceGetName and hipDeviceTotalMem, not from
// the properties struct, whose layout changed in 6.0.

// bindings lists every symbol the driver needs.
func (rt *runtimeAPI) bindings() []gpurt.Binding {
	s := &rt.Syms
	return []gpurt.Binding{
		gpurt.Required("hipGetDeviceCount", &s.GetDeviceCount),
		gpurt.Required("hipSetDevice", &s.SetDevice),
		gpurt.Required("hipDeviceGetAttribute", &s.DeviceGetAttribute),
		gpurt.Required("hipDeviceGetName", &rt.deviceGetName),
		gpurt.Required("hipDeviceTotalMem", &rt.deviceTotalMem),
		gpurt.Required("hipMemGetInfo", &s.MemGetInfo),
		gpurt.Required("hipStreamCreateWithPriority", &s.StreamCreateWithPriority),
		gpurt.Required("hipStreamDestroy", &s.StreamDestroy),
		gpurt.Required("hipStreamSynchronize", &s.StreamSynchronize),
		gpurt.Required("hipStreamQuery", &s.StreamQuery),
		gpurt.Required("hipStreamIsCapturing", &s.StreamIsCapturing),
		gpurt.Required("hipMalloc", &s.Malloc),
		gpurt.Required("hipFree", &s.Free),
		gpurt.Required("hipMemPoolCreate", &s.MemPoolCreate),
		gpurt.Required("hipMemPoolDestroy", &s.MemPoolDestroy),
		gpurt.Required("hipDeviceGetDefaultMemPool", &s.DeviceGetDefaultMemPool),
		gpurt.Required("hipMemPoolSetAttribute", &s.MemPoolSetAttribute),
		gpurt.Required("hipMemPoolTrimTo", &s.MemPoolTrimTo),
		gpurt.Required("hipMallocFromPoolAsync", &s.MallocFromPoolAsync),
		gpurt.Required("hipFreeAsync", &s.FreeAsync),
		gpurt.Required("hipHostMalloc", &s.HostAlloc),
		gpurt.Required("hipHostFree", &s.HostFree),
		gpurt.Required("hipHostRegister", &s.HostRegister),
		gpurt.Required("hipHostUnregister", &s.HostUnregister),
		gpurt.Required("hipMemcpyAsync", &s.MemcpyAsync),
		gpurt.Required("hipMemsetAsync", &s.MemsetAsync),
		gpurt.Required("hipStreamBeginCapture", &s.StreamBeginCapture),
		gpurt.Required("hipStreamEndCapture", &s.StreamEndCapture),
		gpurt.Required("hipGraphInstantiateWithFlags", &s.GraphInstantiateWithFlags),
		gpurt.Required("hipGraphLaunch", &s.GraphLaunch),
		gpurt.Required("hipGraphExecDestroy", &s.GraphExecDestroy),
		gpurt.Required("hipGraphDestroy", &s.GraphDestroy),
		gpurt.Required("hipThreadExchangeStreamCaptureMode", &s.ThreadExchangeCaptureMode),
		gpurt.Required("hipIpcGetMemHandle", &s.IPCGetMemHandle),
		gpurt.Required("hipIpcOpenMemHandle", &s.IPCOpenMemHandle),
		gpurt.Required("hipIpcCloseMemHandle", &s.IPCCloseMemHandle),
		gpurt.Required("hipMemPoolExportToShareableHandle", &s.MemPoolExportToShareableHandle),
		gpurt.Required("hipMemPoolImportFromShareableHandle", &s.MemPoolImportFromShareableHandle),
		gpurt.Required("hipMemPoolExportPointer", &s.MemPoolExportPointer),
		gpurt.Required("hipMemPoolImportPointer", &s.MemPoolImportPointer),
		// Optional: without it graph memory is not trimmed (a warning at
		// open says so). Not declared in 5.2.3's header.
		gpurt.Optional("hipDeviceGraphMemTrim", &s.GraphMemTrim),
		// Optional: registered host memory's device address
		// (hipHostGetDevicePointer(void** devPtr, void* hstPtr,
		// unsigned int flags), hip_runtime_api.h:3097); without it
		// DevicePtr is 0.
		gpurt.Optional("hipHostGetDevicePointer", &s.HostGetDevicePointer),
		// Optional: managed memory (internal/gpurt/managed.go):
		// hipMallocManaged(void **dev_ptr, size_t size, unsigned int
		// flags) and hipMemPrefetchAsync(const void *dev_ptr, size_t
		// count, int device, hipStream_t stream), hip_runtime_api.h:2587
		// and 2600 (5.2.3; both exported, hip_4.2).
		gpurt.Optional("hipMallocManaged", &s.MallocManaged),
		gpurt.Optional("hipMemPrefetchAsync", &s.MemPrefetchAsync),
		// Optional: without it LaunchHostFunc fails (a warning at open
		// says so). Declared in 5.2.3's header, but Debian's
		// libamdhip64.so.5 (5.2.3) does not export it.
		gpurt.Optional("hipLaunchHostFunc", &s.LaunchHostFunc),
		// Optional: the kernels (LoadModule says what is missing).
		gpurt.Optional("hipGetDevice", &rt.getDevice),
		gpurt.Optional("hipGetDeviceProperties", &rt.props),
		gpurt.Optional("hipGetDevicePropertiesR0600", &rt.propsR0600),
		gpurt.Optional("hipModuleLoadData", &rt.moduleLoadData),
		gpurt.Optional("hipModuleGetFunction", &rt.moduleGetFunction),
		gpurt.Optional("hipModuleUnload", &rt.moduleUnload),
		gpurt.Optional("hipModuleLaunchKernel", &rt.moduleLaunchKernel),
		gpurt.Optional("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", &rt.moduleOccupancy),
		// Optional: ranks' device identity and peer access
		// (internal/gpurt/topology.go says what is lost without them).
		gpurt.Optional("hipDeviceGetPCIBusId", &s.DeviceGetPCIBusId),
		gpurt.Optional("hipDeviceCanAccessPeer", &s.DeviceCanAccessPeer),
		gpurt.Optional("hipDeviceEnablePeerAccess", &s.DeviceEnablePeerAccess),
		// Optional: virtual memory (vm.go; the driver offers none without
		// them). In 5.2.3's header and library (hip_5.1).
		gpurt.Optional("hipMemGetAllocationGranularity", &rt.memGranularity),
		gpurt.Optional("hipMemAddressReserve", &rt.memAddressReserve),
		gpurt.Optional("hipMemAddressFree", &rt.memAddressFree),
		gpurt.Optional("hipMemCreate", &rt.memCreate),
		gpurt.Optional("hipMemRelease", &rt.memRelease),
		gpurt.Optional("hipMemMap", &rt.memMap),
		gpurt.Optional("hipMemUnmap", &rt.memUnmap),
		gpurt.Optional("hipMemSetAccess", &rt.memSetAccess),
	}
}

// resolve looks every binding up with Dlsym (gpurt: never
// RegisterLibFunc, which panics on a missing symbol).
func resolve(handle uintptr, path string, bs []gpurt.Binding) error {
	return vendor.Resolve(handle, path, bs)
}
