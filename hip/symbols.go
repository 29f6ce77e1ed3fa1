package hip

import (
	"fmt"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
)

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
// Deliberately not bound: hipGetDeviceProperties (from ROCm 6.0 a macro
// for hipGetDevicePropertiesR0600 with a larger struct; the name and total
// memory come from hipDeviceGetName and hipDeviceTotalMem instead),
// hipGraphInstantiate (its log-buffer parameters), hipStreamGetCaptureInfo
// (changed across versions): capture status comes from
// hipStreamIsCapturing only.

// symbols are the resolved addresses, called with purego.SyscallN.
type symbols struct {
	getDeviceCount, setDevice, deviceGetAttribute, deviceGetName uintptr
	deviceTotalMem, memGetInfo                                   uintptr
	streamCreateWithPriority, streamDestroy, streamSynchronize   uintptr
	streamQuery, streamIsCapturing                               uintptr
	malloc, free                                                 uintptr
	memPoolCreate, memPoolDestroy, deviceGetDefaultMemPool       uintptr
	memPoolSetAttribute, mallocFromPoolAsync, freeAsync          uintptr
	hostMalloc, hostFree, memcpyAsync, memsetAsync               uintptr
	hostRegister, hostUnregister                                 uintptr
	streamBeginCapture, streamEndCapture                         uintptr
	graphInstantiateWithFlags, graphLaunch, graphExecDestroy     uintptr
	graphDestroy, threadExchangeCaptureMode                      uintptr
	ipcGetMemHandle, ipcOpenMemHandle, ipcCloseMemHandle         uintptr
	memPoolExportToShareableHandle                               uintptr
	memPoolImportFromShareableHandle                             uintptr
	memPoolExportPointer, memPoolImportPointer                   uintptr
	memPoolTrimTo, launchHostFunc                                uintptr
	graphMemTrim                                                 uintptr // optional: 0 when missing
}

// binding is one symbol to resolve: optional ones may be missing (the
// feature they serve degrades), required ones refuse the library.
type binding struct {
	name     string
	addr     *uintptr
	optional bool
}

// bindings lists every symbol the driver needs.
func (s *symbols) bindings() []binding {
	return []binding{
		{"hipGetDeviceCount", &s.getDeviceCount, false},
		{"hipSetDevice", &s.setDevice, false},
		{"hipDeviceGetAttribute", &s.deviceGetAttribute, false},
		{"hipDeviceGetName", &s.deviceGetName, false},
		{"hipDeviceTotalMem", &s.deviceTotalMem, false},
		{"hipMemGetInfo", &s.memGetInfo, false},
		{"hipStreamCreateWithPriority", &s.streamCreateWithPriority, false},
		{"hipStreamDestroy", &s.streamDestroy, false},
		{"hipStreamSynchronize", &s.streamSynchronize, false},
		{"hipStreamQuery", &s.streamQuery, false},
		{"hipStreamIsCapturing", &s.streamIsCapturing, false},
		{"hipMalloc", &s.malloc, false},
		{"hipFree", &s.free, false},
		{"hipMemPoolCreate", &s.memPoolCreate, false},
		{"hipMemPoolDestroy", &s.memPoolDestroy, false},
		{"hipDeviceGetDefaultMemPool", &s.deviceGetDefaultMemPool, false},
		{"hipMemPoolSetAttribute", &s.memPoolSetAttribute, false},
		{"hipMemPoolTrimTo", &s.memPoolTrimTo, false},
		{"hipMallocFromPoolAsync", &s.mallocFromPoolAsync, false},
		{"hipFreeAsync", &s.freeAsync, false},
		{"hipHostMalloc", &s.hostMalloc, false},
		{"hipHostFree", &s.hostFree, false},
		{"hipHostRegister", &s.hostRegister, false},
		{"hipHostUnregister", &s.hostUnregister, false},
		{"hipMemcpyAsync", &s.memcpyAsync, false},
		{"hipMemsetAsync", &s.memsetAsync, false},
		{"hipStreamBeginCapture", &s.streamBeginCapture, false},
		{"hipStreamEndCapture", &s.streamEndCapture, false},
		{"hipGraphInstantiateWithFlags", &s.graphInstantiateWithFlags, false},
		{"hipGraphLaunch", &s.graphLaunch, false},
		{"hipGraphExecDestroy", &s.graphExecDestroy, false},
		{"hipGraphDestroy", &s.graphDestroy, false},
		{"hipThreadExchangeStreamCaptureMode", &s.threadExchangeCaptureMode, false},
		{"hipIpcGetMemHandle", &s.ipcGetMemHandle, false},
		{"hipIpcOpenMemHandle", &s.ipcOpenMemHandle, false},
		{"hipIpcCloseMemHandle", &s.ipcCloseMemHandle, false},
		{"hipMemPoolExportToShareableHandle", &s.memPoolExportToShareableHandle, false},
		{"hipMemPoolImportFromShareableHandle", &s.memPoolImportFromShareableHandle, false},
		{"hipMemPoolExportPointer", &s.memPoolExportPointer, false},
		{"hipMemPoolImportPointer", &s.memPoolImportPointer, false},
		// Optional: without it graph memory is not trimmed (a warning at
		// open says so). Not declared in 5.2.3's header.
		{"hipDeviceGraphMemTrim", &s.graphMemTrim, true},
		// Optional: without it LaunchHostFunc fails (a warning at open
		// says so). Declared in 5.2.3's header, but Debian's
		// libamdhip64.so.5 (5.2.3) does not export it.
		{"hipLaunchHostFunc", &s.launchHostFunc, true},
	}
}

// resolve looks every binding up with Dlsym (never RegisterLibFunc, which
// panics on a missing symbol).
func resolve(handle uintptr, path string, bs []binding) error {
	var missing []string
	for _, b := range bs {
		addr, err := purego.Dlsym(handle, b.name)
		if err != nil || addr == 0 {
			if !b.optional {
				missing = append(missing, b.name)
			}
			continue
		}
		*b.addr = addr
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: hip: %s: lacks required symbols %v", alloc.ErrBackendUnavailable, path, missing)
	}
	return nil
}
