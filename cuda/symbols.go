package cuda

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// minRuntimeVersion is CUDA 11.4: the first runtime with
// cudaGraphInstantiateWithFlags and cudaGraphInstantiateFlagAutoFreeOnLaunch
// (cuda_runtime_api.h guards it with __CUDART_API_VERSION >= 11040); stream
// ordered pools (cudaMallocFromPoolAsync) arrived in 11.2.
const minRuntimeVersion = 11040

// Signatures bound here (cuda_runtime_api.h, CUDA 11.4 to 12.x; every
// function returns cudaError_t, a C int):
//
//	cudaRuntimeGetVersion(int *runtimeVersion)
//	cudaDriverGetVersion(int *driverVersion)
//	const char *cudaGetErrorString(cudaError_t error)
//	cudaGetDeviceCount(int *count)
//	cudaSetDevice(int device)
//	cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
//	cudaGetDeviceProperties[_v2](struct cudaDeviceProp *prop, int device)
//	cudaMemGetInfo(size_t *free, size_t *total)
//	cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
//	cudaStreamDestroy(cudaStream_t stream)
//	cudaStreamSynchronize(cudaStream_t stream)
//	cudaStreamQuery(cudaStream_t stream)            // 600 = cudaErrorNotReady
//	cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
//	cudaMalloc(void **devPtr, size_t size)
//	cudaFree(void *devPtr)
//	cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
//	cudaMemPoolDestroy(cudaMemPool_t memPool)
//	cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
//	cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
//	cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
//	cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
//	cudaFreeAsync(void *devPtr, cudaStream_t hStream)
//	cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
//	cudaFreeHost(void *ptr)
//	cudaHostRegister(void *ptr, size_t size, unsigned int flags)
//	cudaHostUnregister(void *ptr)
//	cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
//	cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
//	cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
//	cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
//	cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
//	cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
//	cudaGraphExecDestroy(cudaGraphExec_t graphExec)
//	cudaGraphDestroy(cudaGraph_t graph)
//	cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)  // CUDA 10.1+
//	cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)  // CUDA 10.0+; cudaHostFn_t is void (*)(void *userData)
//	cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
//	cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)  // handle by value
//	cudaIpcCloseMemHandle(void *devPtr)
//	cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
//	        enum cudaMemAllocationHandleType handleType, unsigned int flags)       // CUDA 11.2+
//	cudaMemPoolImportFromShareableHandle(cudaMemPool_t *memPool, void *shareableHandle,
//	        enum cudaMemAllocationHandleType handleType, unsigned int flags)       // CUDA 11.2+
//	cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)  // CUDA 11.2+
//	cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool, struct cudaMemPoolPtrExportData *exportData)
//	cudaDeviceGraphMemTrim(int device)                // optional
//	cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)           // optional (topology)
//	cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)  // optional (peer access)
//	cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)       // optional; flags must be 0
//
// The last three: NVIDIA's runtime API reference (Device Management;
// Peer Device Memory Access); all three are exported by Debian's
// libcudart.so.11.0 (11.8).
//
// Deliberately not bound: cudaGraphInstantiate (its parameters changed in
// CUDA 12), cudaStreamGetCaptureInfo (changed in 11.3 (_v2), 12.3 and 13):
// capture status comes from cudaStreamIsCapturing, stable since CUDA 10.

// bindings lists what is bound for a runtime version, or why the version
// is refused. The one version-dependent choice today is the device
// properties struct: CUDA 12.x's header renames cudaGetDeviceProperties to
// cudaGetDeviceProperties_v2 (the struct grew), and CUDA 13 goes back to
// the plain name for its own layout. Only the leading `char name[256]` is
// read, which every layout shares.
func (rt *runtimeAPI) bindings(runtimeVersion int) ([]gpurt.Binding, error) {
	s := &rt.Syms
	if runtimeVersion < minRuntimeVersion {
		return nil, fmt.Errorf("%w: cuda: runtime version %s is older than the minimum %s (stream-ordered pools and cudaGraphInstantiateWithFlags)",
			driver.ErrBackendUnavailable, versionString(runtimeVersion), versionString(minRuntimeVersion))
	}
	props := "cudaGetDeviceProperties"
	if runtimeVersion >= 12000 && runtimeVersion < 13000 {
		props = "cudaGetDeviceProperties_v2"
	}
	return []gpurt.Binding{
		gpurt.Required("cudaGetDeviceCount", &s.GetDeviceCount),
		gpurt.Required("cudaSetDevice", &s.SetDevice),
		gpurt.Required("cudaDeviceGetAttribute", &s.DeviceGetAttribute),
		gpurt.Optional(props, &rt.getDeviceProperties),
		gpurt.Required("cudaMemGetInfo", &s.MemGetInfo),
		gpurt.Required("cudaStreamCreateWithPriority", &s.StreamCreateWithPriority),
		gpurt.Required("cudaStreamDestroy", &s.StreamDestroy),
		gpurt.Required("cudaStreamSynchronize", &s.StreamSynchronize),
		gpurt.Required("cudaStreamQuery", &s.StreamQuery),
		gpurt.Required("cudaStreamIsCapturing", &s.StreamIsCapturing),
		gpurt.Required("cudaMalloc", &s.Malloc),
		gpurt.Required("cudaFree", &s.Free),
		gpurt.Required("cudaMemPoolCreate", &s.MemPoolCreate),
		gpurt.Required("cudaMemPoolDestroy", &s.MemPoolDestroy),
		gpurt.Required("cudaDeviceGetDefaultMemPool", &s.DeviceGetDefaultMemPool),
		gpurt.Required("cudaMemPoolSetAttribute", &s.MemPoolSetAttribute),
		gpurt.Required("cudaMemPoolTrimTo", &s.MemPoolTrimTo),
		gpurt.Required("cudaMallocFromPoolAsync", &s.MallocFromPoolAsync),
		gpurt.Required("cudaFreeAsync", &s.FreeAsync),
		gpurt.Required("cudaHostAlloc", &s.HostAlloc),
		gpurt.Required("cudaFreeHost", &s.HostFree),
		gpurt.Required("cudaHostRegister", &s.HostRegister),
		gpurt.Required("cudaHostUnregister", &s.HostUnregister),
		gpurt.Required("cudaMemcpyAsync", &s.MemcpyAsync),
		gpurt.Required("cudaMemsetAsync", &s.MemsetAsync),
		gpurt.Required("cudaStreamBeginCapture", &s.StreamBeginCapture),
		gpurt.Required("cudaStreamEndCapture", &s.StreamEndCapture),
		gpurt.Required("cudaGraphInstantiateWithFlags", &s.GraphInstantiateWithFlags),
		gpurt.Required("cudaGraphLaunch", &s.GraphLaunch),
		gpurt.Required("cudaGraphExecDestroy", &s.GraphExecDestroy),
		gpurt.Required("cudaGraphDestroy", &s.GraphDestroy),
		gpurt.Required("cudaThreadExchangeStreamCaptureMode", &s.ThreadExchangeCaptureMode),
		gpurt.Required("cudaLaunchHostFunc", &s.LaunchHostFunc),
		gpurt.Required("cudaIpcGetMemHandle", &s.IPCGetMemHandle),
		gpurt.Required("cudaIpcOpenMemHandle", &s.IPCOpenMemHandle),
		gpurt.Required("cudaIpcCloseMemHandle", &s.IPCCloseMemHandle),
		gpurt.Required("cudaMemPoolExportToShareableHandle", &s.MemPoolExportToShareableHandle),
		gpurt.Required("cudaMemPoolImportFromShareableHandle", &s.MemPoolImportFromShareableHandle),
		gpurt.Required("cudaMemPoolExportPointer", &s.MemPoolExportPointer),
		gpurt.Required("cudaMemPoolImportPointer", &s.MemPoolImportPointer),
		// Optional: without it graph memory is not trimmed (a warning
		// at open says so). Declared in every cuda_runtime_api.h from
		// 11.4 on, but a missing symbol must not refuse the library.
		gpurt.Optional("cudaDeviceGraphMemTrim", &s.GraphMemTrim),
		// Optional: registered host memory's device address
		// (cudaHostGetDevicePointer(void **pDevice, void *pHost,
		// unsigned int flags), flags 0); without it DevicePtr is 0.
		gpurt.Optional("cudaHostGetDevicePointer", &s.HostGetDevicePointer),
		// Optional: managed memory (internal/gpurt/managed.go):
		// cudaMallocManaged(void **devPtr, size_t size, unsigned int
		// flags), and cudaMemPrefetchAsync, whose parameters changed in
		// CUDA 13 under the same name: (const void *devPtr, size_t count,
		// int dstDevice, cudaStream_t stream) before, (const void *devPtr,
		// size_t count, struct cudaMemLocation location, unsigned int
		// flags, cudaStream_t stream) from 13.0 (the CUDA 13 programming
		// guide, "Data Prefetching"; RMM's prefetch switches on
		// CUDART_VERSION >= 13000 the same way).
		gpurt.Optional("cudaMallocManaged", &s.MallocManaged),
		gpurt.Optional("cudaMemPrefetchAsync", prefetchSym(s, runtimeVersion)),
		// Optional: ranks' device identity and peer access
		// (internal/gpurt/topology.go says what is lost without them).
		gpurt.Optional("cudaDeviceGetPCIBusId", &s.DeviceGetPCIBusId),
		gpurt.Optional("cudaDeviceCanAccessPeer", &s.DeviceCanAccessPeer),
		gpurt.Optional("cudaDeviceEnablePeerAccess", &s.DeviceEnablePeerAccess),
	}, nil
}

// prefetchSym is where cudaMemPrefetchAsync binds for runtimeVersion:
// the location ABI from CUDA 13, the device-ordinal one before.
func prefetchSym(s *gpurt.Syms, runtimeVersion int) *gpurt.Sym {
	if runtimeVersion >= 13000 {
		return &s.MemPrefetchLocation
	}
	return &s.MemPrefetchAsync
}

// resolve looks every binding up with Dlsym (gpurt: never
// RegisterLibFunc, which panics on a missing symbol).
func resolve(handle uintptr, path string, bs []gpurt.Binding) error {
	return vendor.Resolve(handle, path, bs)
}

// versionString renders CUDA's 1000*major + 10*minor encoding.
func versionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }
