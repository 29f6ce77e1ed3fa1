/* A fake libcudart for tests on machines without a GPU: the CUDA front of
 * the shared fake (internal/fakegpu/core.c, which holds the semantics:
 * memory, streams, captures, graphs, pools, IPC, the call log). This file
 * holds what is CUDA's own: names, versions, error strings and device
 * queries.
 *
 * Environment: FAKE_CUDART_VERSION, FAKE_CUDA_DRIVER_VERSION (default
 * 12040; 0: no driver), FAKE_CUDA_DEVICES (default 1; 0: no device),
 * FAKE_CUDA_NO_POOLS, FAKE_CUDA_INTEGRATED, FAKE_CUDA_MEM (bytes, default 1 GiB),
 * FAKE_CUDA_PAGEABLE_ACCESS (cudaDevAttrPageableMemoryAccess; core.c's
 * kernels then read unregistered host memory) and FAKE_CUDA_HOST_PAGE_TABLES
 * (cudaDevAttrPageableMemoryAccessUsesHostPageTables, default: what
 * FAKE_CUDA_PAGEABLE_ACCESS says, an ATS device such as GB10; 0 with
 * FAKE_CUDA_PAGEABLE_ACCESS=1 is an HMM device),
 * FAKE_CUDA_FAIL=name:code (that function returns code; with
 * FAKE_CUDA_FAIL_INVALIDATES set it also invalidates every active capture),
 * FAKE_CUDA_MAX_THREADS (cudaDevAttrMaxThreadsPerBlock, default 64) and
 * FAKE_CUDA_SMS (cudaDevAttrMultiProcessorCount, default 4),
 * FAKE_CUDA_BLOCKS_PER_SM / FAKE_CUDA_THREADS_PER_SM (what
 * cuOccupancyMaxActiveBlocksPerMultiprocessor answers: core.c),
 * FAKE_CUDA_NO_P2P (device pairs without peer access: core.c),
 * FAKE_CUDA_VM_GRANULARITY and FAKE_CUDA_NO_VM (virtual memory: core.c).
 *
 * Compile with -DFAKE_NO_GRAPH_MEM_TRIM to leave cudaDeviceGraphMemTrim out
 * (an optional symbol for the binding); -DFAKE_NO_DRIVER and
 * -DFAKE_RUNTIME_VERSION=N: see the versions below; -DFAKE_NO_DRIVER_API
 * to leave the driver API (cu*, below) out, as the real libcudart does;
 * -DFAKE_NO_VM_API to leave its virtual memory calls (cuMem*) out, as a
 * driver older than CUDA 10.2 has none; -DFAKE_NO_OCCUPANCY to leave
 * cuOccupancyMaxActiveBlocksPerMultiprocessor out (an optional symbol). */
#define RT(x) cuda##x
#define RTS(x) "cuda" #x
#define ENVN(x) "FAKE_CUDA_" x
#define HOST_ALLOC cudaHostAlloc
#define HOST_ALLOC_S "cudaHostAlloc"
#define HOST_FREE cudaFreeHost
#define HOST_FREE_S "cudaFreeHost"
/* CUDA 11.4+ captures pool allocations as graph nodes. */
static int pool_capture_nodes(void) { return 1; }
/* Measured on an H100 (driver 580, CUDA 13.0): cudaMallocFromPoolAsync in
 * a capture from a pool created with cudaMemHandleTypePosixFileDescriptor
 * returns 801. */
static int exportable_pool_capture_refused(void) { return 1; }
/* cudaIpcMemLazyEnablePeerAccess, which cudaIpcOpenMemHandle's flags must
 * be: 0x01 (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1 in cuda-python's
 * IpcMemFlags; not checked against an installed header here). */
static unsigned ipc_open_flags(void) { return 1; }
/* cudaErrorMisalignedAddress = 716 (driver_types.h; cuda-python's
 * cudaError_t): "a load or store instruction on a memory address which is
 * not aligned", sticky on a GPU. */
static int misaligned_code(void) { return 716; }
#include "core.c"

typedef rtError_t cudaError_t;

/* Versions, as the real runtime reports them (checked against Debian's
 * libcudart.so.11.0, 11.8.89, with no libcuda.so.1 and with a stand-in
 * libcuda.so.1 reporting other driver versions; docs/cuda-backend.md):
 * cudaDriverGetVersion succeeds and reports 0 when no driver is installed,
 * or the driver's version; every call that needs the driver, from
 * cudaRuntimeGetVersion itself to cudaGetDeviceCount and cudaSetDevice,
 * fails with 35 (cudaErrorInsufficientDriver) when there is none or it is
 * of an older major version than the runtime, and with 100 when the driver
 * finds no device (here: FAKE_CUDA_DEVICES=0).
 *
 * Built with -DFAKE_NO_DRIVER this copy behaves as if no driver were
 * installed, and with -DFAKE_RUNTIME_VERSION=13000 it is that runtime,
 * whatever the environment says, so a test loads a broken and a working
 * copy side by side. */
static int driver_version(void) {
#ifdef FAKE_NO_DRIVER
  return 0;
#else
  return envint("FAKE_CUDA_DRIVER_VERSION", 12040);
#endif
}
static int runtime_version(void) {
#ifdef FAKE_RUNTIME_VERSION
  return FAKE_RUNTIME_VERSION;
#else
  return envint("FAKE_CUDART_VERSION", 12040);
#endif
}
static cudaError_t driver_usable(void) {
  int drv = driver_version();
  if (drv == 0 || drv / 1000 < runtime_version() / 1000) return 35;
  return envint("FAKE_CUDA_DEVICES", 1) == 0 ? 100 : 0;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  ENTER("cudaRuntimeGetVersion");
  cudaError_t e = driver_usable();
  if (e) RETURN(e);
  *v = runtime_version();
  RETURN(0);
}
cudaError_t cudaDriverGetVersion(int *v) { ENTER("cudaDriverGetVersion"); *v = driver_version(); RETURN(0); }
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case 0: return "no error";
  case 1: return "invalid argument";
  case 2: return "out of memory";
  case 35: return "CUDA driver version is insufficient for CUDA runtime version";
  case 3: return "initialization error";
  case 100: return "no CUDA-capable device is detected";
  case 101: return "invalid device ordinal";
  case 200: return "device kernel image is invalid";
  case 201: return "invalid device context";
  case 218: return "a PTX JIT compilation failed";
  case 500: return "named symbol not found";
  case 700: return "an illegal memory access was encountered";
  case 701: return "too many resources requested for launch";
  case 400: return "invalid resource handle";
  case 401: return "the operation cannot be performed in the present state";
  case 900: return "operation not permitted when stream is capturing";
  case 901: return "operation failed due to a previous error during capture";
  case 907: return "operation not permitted on an event last recorded in a capturing stream";
  case 908: return "operation not permitted on a stream capture object in current thread";
  }
  return "fake: unknown error";
}
cudaError_t cudaGetDeviceCount(int *n) {
  ENTER("cudaGetDeviceCount");
  cudaError_t e = driver_usable();
  if (e) RETURN(e);
  *n = envint("FAKE_CUDA_DEVICES", 1);
  RETURN(0);
}
cudaError_t cudaSetDevice(int d) {
  ENTER("cudaSetDevice");
  cudaError_t e = driver_usable();
  if (e) RETURN(e);
  if (d < 0 || d >= envint("FAKE_CUDA_DEVICES", 1)) RETURN(101);
  cur_device = d;
  logf_("cudaSetDevice %d", d);
  RETURN(0);
}
cudaError_t cudaDeviceGetAttribute(int *v, int attr, int dev) {
  ENTER("cudaDeviceGetAttribute");
  logf_("cudaDeviceGetAttribute attr=%d device=%d", attr, dev);
  /* cudaDeviceAttr: 1 MaxThreadsPerBlock, 16 MultiProcessorCount, 18
   * Integrated, 88 PageableMemoryAccess, 100
   * PageableMemoryAccessUsesHostPageTables, 115 MemoryPoolsSupported. */
  switch (attr) {
  case 1: *v = max_threads(); break;
  case 16: *v = multiprocessors(); break;
  case 18: *v = envint("FAKE_CUDA_INTEGRATED", 0); break;
  case 88: *v = envint("FAKE_CUDA_PAGEABLE_ACCESS", 0); break;
  case 100: *v = envint("FAKE_CUDA_HOST_PAGE_TABLES", envint("FAKE_CUDA_PAGEABLE_ACCESS", 0)); break;
  case 115: *v = !getenv("FAKE_CUDA_NO_POOLS"); break;
  default: *v = 0;
  }
  RETURN(0);
}
/* cudaDeviceProp: name[256] at 0, size_t totalGlobalMem at 288 (after
 * uuid[16], luid[8], unsigned luidDeviceNodeMask and padding), in every
 * layout from 11.4 to 13.0. FAKE_CUDA_PROP_MEM overrides the total. */
static cudaError_t props(const char *fn, char *p, int dev) {
  ENTER(fn);
  logf_("%s device=%d", fn, dev);
  snprintf(p, 256, "Fake GPU %d", dev);
  size_t total = envll("FAKE_CUDA_PROP_MEM", envll("FAKE_CUDA_MEM", 1LL << 30));
  memcpy(p + 288, &total, sizeof total);
  RETURN(0);
}
cudaError_t cudaGetDeviceProperties(char *p, int dev) { return props("cudaGetDeviceProperties", p, dev); }
cudaError_t cudaGetDeviceProperties_v2(char *p, int dev) { return props("cudaGetDeviceProperties_v2", p, dev); }
cudaError_t cudaMemGetInfo(size_t *fr, size_t *total) {
  ENTER("cudaMemGetInfo");
  /* FAKE_CUDA_MEMINFO_TOTAL: what GB10 has been seen to under-report */
  *total = envll("FAKE_CUDA_MEMINFO_TOTAL", envll("FAKE_CUDA_MEM", 1LL << 30));
  *fr = *total > live_bytes + held() ? *total - live_bytes - held() : 0;
  logf_("cudaMemGetInfo");
  RETURN(0);
}


#ifndef FAKE_NO_DRIVER_API
/* ---- the driver API (cuda.h) for modules and launches ----
 * The real libcudart does not export it (the cuda package then takes it
 * from libcuda.so.1); the fake does, so the tests need no second library.
 * CUresult codes are the cudaError_t codes used here. Contexts: one
 * primary context per device; the current one is per thread (cuCtx*),
 * and setting it makes its device current, as in the runtime. A module
 * belongs to the context current when it was loaded; a launch needs that
 * context current and a stream of its device. */
typedef int CUresult;
typedef struct { int device, refs; } fakectx_t;
static fakectx_t primary_ctx[16];
static __thread fakectx_t *cur_ctx;
static int cu_inited;

static int is_primary(void *c) { return c >= (void *)primary_ctx && c < (void *)(primary_ctx + 16); }

CUresult cuInit(unsigned flags) {
  ENTER("cuInit");
  logf_("cuInit flags=%u", flags);
  if (flags) RETURN(1);
  cudaError_t e = driver_usable();
  if (e) RETURN(e);
  cu_inited = 1;
  RETURN(0);
}
CUresult cuDeviceGet(int *dev, int ordinal) {
  ENTER("cuDeviceGet");
  if (!cu_inited) RETURN(3);
  if (!dev) RETURN(1);
  if (ordinal < 0 || ordinal >= ndevices() || ordinal >= 16) RETURN(101);
  *dev = ordinal;
  RETURN(0);
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  ENTER("cuDevicePrimaryCtxRetain");
  logf_("cuDevicePrimaryCtxRetain device=%d", dev);
  if (!cu_inited) RETURN(3);
  if (!ctx) RETURN(1);
  if (dev < 0 || dev >= ndevices() || dev >= 16) RETURN(101);
  primary_ctx[dev].device = dev;
  primary_ctx[dev].refs++;
  *ctx = &primary_ctx[dev];
  RETURN(0);
}
/* cuda.h (11.0+): #define cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2 */
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  ENTER("cuDevicePrimaryCtxRelease_v2");
  logf_("cuDevicePrimaryCtxRelease_v2 device=%d", dev);
  if (!cu_inited) RETURN(3);
  if (dev < 0 || dev >= ndevices() || dev >= 16) RETURN(101);
  if (primary_ctx[dev].refs == 0) RETURN(201);
  primary_ctx[dev].refs--;
  RETURN(0);
}
CUresult cuCtxGetCurrent(void **ctx) {
  ENTER("cuCtxGetCurrent");
  if (!cu_inited) RETURN(3);
  if (!ctx) RETURN(1);
  *ctx = cur_ctx;
  RETURN(0);
}
CUresult cuCtxSetCurrent(void *ctx) {
  ENTER("cuCtxSetCurrent");
  logf_("cuCtxSetCurrent %p", ctx);
  if (!cu_inited) RETURN(3);
  if (ctx && !is_primary(ctx)) RETURN(201);
  cur_ctx = ctx;
  if (cur_ctx) cur_device = cur_ctx->device;
  RETURN(0);
}
/* PTX is NUL-terminated text with a .version and a .target directive. */
CUresult cuModuleLoadData(void **m, const void *image) {
  ENTER("cuModuleLoadData");
  if (!cu_inited) RETURN(3);
  if (!m || !image) RETURN(1);
  logf_("cuModuleLoadData bytes=%zu ctx=%p", strlen(image), (void *)cur_ctx);
  if (!cur_ctx) RETURN(201);
  if (!strstr(image, ".version ") || !strstr(image, ".target ")) RETURN(218);
  RETURN(module_load_(m, image, cur_ctx, cur_ctx->device));
}
/* A PTX kernel is a ".entry name(" directive. */
static int ptx_has(const char *image, const char *name) { return has_text(image, ".entry ", name, "("); }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  ENTER("cuModuleGetFunction");
  logf_("cuModuleGetFunction %p %s", m, name ? name : "(null)");
  if (!cu_inited) RETURN(3);
  RETURN(function_get_(f, m, name, ptx_has));
}
CUresult cuModuleUnload(void *m) {
  ENTER("cuModuleUnload");
  logf_("cuModuleUnload %p", m);
  if (!cu_inited) RETURN(3);
  RETURN(module_unload_(m));
}
CUresult cuLaunchKernel(void *fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *h, void **params, void **extra) {
  ENTER("cuLaunchKernel");
  if (!cu_inited) RETURN(3);
  function_t *f = function_of(fh);
  if (!f) RETURN(400);
  /* The function's context must be current; a stream of another device
   * belongs to another context. */
  if (cur_ctx != f->m->ctx) { logf_("cuLaunchKernel %s: context %p is not the module's %p", f->name, (void *)cur_ctx, f->m->ctx); RETURN(201); }
  stream_t *s = stream_of(h);
  if (s && s->device != f->m->device) RETURN(400);
  RETURN(launch_("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shared, h, params, extra));
}
#ifndef FAKE_NO_OCCUPANCY
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int block, size_t shared) {
  ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (!cu_inited) RETURN(3);
  RETURN(occupancy_("cuOccupancyMaxActiveBlocksPerMultiprocessor", n, f, block, shared));
}
#endif
CUresult cuGetErrorString(CUresult e, const char **s) {
  if (!s) return 1;
  *s = cudaGetErrorString(e);
  return 0;
}
#ifndef FAKE_NO_VM_API
/* Virtual memory (core.c's rules), on the current context: every call
 * needs one (201 without), as the driver API acts on it. The structs
 * (cuda/vm.go): CUmemAllocationProp has type at 0, location type at 8 and
 * id at 12; CUmemAccessDesc location type at 0, id at 4, flags at 8. */
static CUresult cu_vm_ready(void) { return !cu_inited ? 3 : !cur_ctx ? 201 : 0; }
static CUresult cu_prop(const char *prop) {
  if (!prop) return 1;
  int v[4];
  memcpy(v, prop, sizeof v);
  return vm_prop_ok(v[0], v[2], v[3]);
}
CUresult cuMemGetAllocationGranularity(size_t *g, const char *prop, int option) {
  ENTER("cuMemGetAllocationGranularity");
  logf_("cuMemGetAllocationGranularity option=%d ctx=%p", option, (void *)cur_ctx);
  CUresult e = cu_vm_ready();
  if (!e) e = cu_prop(prop);
  RETURN(e ? e : vm_granularity_(g, option));
}
CUresult cuMemAddressReserve(unsigned long long *p, size_t n, size_t align, unsigned long long addr, unsigned long long flags) {
  ENTER("cuMemAddressReserve");
  logf_("cuMemAddressReserve size=%zu alignment=%zu addr=%#llx flags=%llu", n, align, addr, flags);
  CUresult e = cu_vm_ready();
  if (e) RETURN(e);
  void *out;
  e = vm_reserve_(&out, n, align, (void *)(uintptr_t)addr, flags);
  if (!e) *p = (uintptr_t)out;
  RETURN(e);
}
CUresult cuMemAddressFree(unsigned long long p, size_t n) {
  ENTER("cuMemAddressFree");
  logf_("cuMemAddressFree %#llx size=%zu", p, n);
  CUresult e = cu_vm_ready();
  RETURN(e ? e : vm_free_((void *)(uintptr_t)p, n));
}
CUresult cuMemCreate(unsigned long long *h, size_t n, const char *prop, unsigned long long flags) {
  ENTER("cuMemCreate");
  logf_("cuMemCreate size=%zu flags=%llu", n, flags);
  CUresult e = cu_vm_ready();
  if (!e) e = cu_prop(prop);
  if (e) RETURN(e);
  void *out;
  int v[4];
  memcpy(v, prop, sizeof v);
  e = vm_create_(&out, n, v[3], flags);
  if (!e) *h = (uintptr_t)out;
  RETURN(e);
}
CUresult cuMemRelease(unsigned long long h) {
  ENTER("cuMemRelease");
  logf_("cuMemRelease %#llx", h);
  CUresult e = cu_vm_ready();
  RETURN(e ? e : vm_release_((void *)(uintptr_t)h));
}
CUresult cuMemMap(unsigned long long p, size_t n, size_t offset, unsigned long long h, unsigned long long flags) {
  ENTER("cuMemMap");
  logf_("cuMemMap %#llx size=%zu offset=%zu handle=%#llx flags=%llu", p, n, offset, h, flags);
  CUresult e = cu_vm_ready();
  RETURN(e ? e : vm_map_((void *)(uintptr_t)p, n, offset, (void *)(uintptr_t)h, flags));
}
CUresult cuMemUnmap(unsigned long long p, size_t n) {
  ENTER("cuMemUnmap");
  logf_("cuMemUnmap %#llx size=%zu", p, n);
  CUresult e = cu_vm_ready();
  RETURN(e ? e : vm_unmap_((void *)(uintptr_t)p, n));
}
CUresult cuMemSetAccess(unsigned long long p, size_t n, const int *desc, size_t count) {
  ENTER("cuMemSetAccess");
  CUresult e = cu_vm_ready();
  if (e) RETURN(e);
  if (!desc) RETURN(1);
  logf_("cuMemSetAccess %#llx size=%zu location=%d:%d flags=%d count=%zu", p, n, desc[0], desc[1], desc[2], count);
  RETURN(vm_set_access_((void *)(uintptr_t)p, n, desc[0], desc[1], desc[2], count));
}
#endif /* FAKE_NO_VM_API */
#endif

/* cudaMemPrefetchAsync changed its parameters in CUDA 13 under the same
 * name: before, (const void *devPtr, size_t count, int dstDevice,
 * cudaStream_t stream), cudaCpuDeviceId (-1) for the host; from 13.0,
 * (const void *devPtr, size_t count, struct cudaMemLocation location,
 * unsigned int flags, cudaStream_t stream), the 8-byte struct {type, id}
 * passed by value in one register (type 1 device, id its ordinal; type 2
 * host). This fake answers as the runtime version it reports: the third
 * argument is the device, or the location's two ints (type in the low
 * half); the stream the fourth or the fifth. */
cudaError_t cudaMemPrefetchAsync(const void *p, size_t n, unsigned long long a3, unsigned long long a4, void *a5) {
  ENTER("cudaMemPrefetchAsync");
  int device;
  void *h;
  if (runtime_version() >= 13000) {
    int type = (int)(unsigned)(a3 & 0xffffffffu), id = (int)(unsigned)(a3 >> 32);
    logf_("cudaMemPrefetchAsync %p n=%zu location=%d:%d flags=%llu stream=%p", p, n, type, id, a4, a5);
    if (a4 != 0 || (type != 1 && type != 2)) RETURN(1);
    device = type == 2 ? -1 : id;
    if (type == 1 && id < 0) RETURN(1);
    h = a5;
  } else {
    device = (int)(unsigned)(a3 & 0xffffffffu);
    logf_("cudaMemPrefetchAsync %p n=%zu device=%d stream=%p", p, n, device, (void *)a4);
    h = (void *)a4;
  }
  RETURN(prefetch_(p, n, device, h));
}
