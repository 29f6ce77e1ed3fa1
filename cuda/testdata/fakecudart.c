/* A fake libcudart for tests on machines without a GPU: the CUDA front of
 * the shared fake (internal/fakegpu/core.c, which holds the semantics:
 * memory, streams, captures, graphs, pools, IPC, the call log). This file
 * holds what is CUDA's own: names, versions, error strings and device
 * queries.
 *
 * Environment: FAKE_CUDART_VERSION, FAKE_CUDA_DRIVER_VERSION (default
 * 12040; 0: no driver), FAKE_CUDA_DEVICES (default 1; 0: no device),
 * FAKE_CUDA_NO_POOLS, FAKE_CUDA_INTEGRATED, FAKE_CUDA_MEM (bytes, default 1 GiB),
 * FAKE_CUDA_FAIL=name:code (that function returns code; with
 * FAKE_CUDA_FAIL_INVALIDATES set it also invalidates every active capture).
 *
 * Compile with -DFAKE_NO_GRAPH_MEM_TRIM to leave cudaDeviceGraphMemTrim out
 * (an optional symbol for the binding); -DFAKE_NO_DRIVER and
 * -DFAKE_RUNTIME_VERSION=N: see the versions below. */
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
  case 100: return "no CUDA-capable device is detected";
  case 101: return "invalid device ordinal";
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
  *v = attr == 115 ? !getenv("FAKE_CUDA_NO_POOLS") : attr == 18 ? envint("FAKE_CUDA_INTEGRATED", 0) : 0;
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
  *fr = *total > live_bytes + graph_cached ? *total - live_bytes - graph_cached : 0;
  logf_("cudaMemGetInfo");
  RETURN(0);
}

