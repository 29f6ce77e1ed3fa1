/* A fake libamdhip64 for tests on machines without an AMD GPU: the HIP
 * front of the shared fake (internal/fakegpu/core.c holds the semantics:
 * memory, streams, captures, graphs, pools, IPC, the call log). This file
 * holds what is HIP's own, as Debian's libamdhip64 5.2.3 and its headers
 * (/usr/include/hip/hip_runtime_api.h) show it: names, the version, error
 * strings (5.2.3's hipGetErrorString returns the code's name), device
 * queries and their attribute numbers, and what changed between versions.
 *
 * Environment: FAKE_HIP_VERSION (HIP_VERSION encoding, major*10^7 +
 * minor*10^5 + patch; default 60100000), FAKE_HIP_DEVICES (default 1; 0:
 * no device: hipGetDeviceCount returns 100, hipErrorNoDevice, and the
 * other device calls 101, as the real 5.2.3 does without a GPU),
 * FAKE_HIP_INTEGRATED, FAKE_HIP_MEM (bytes, default 1 GiB),
 * FAKE_HIP_MEMINFO_TOTAL, FAKE_HIP_POOLS_ATTR (what
 * hipDeviceAttributeMemoryPoolsSupported reports; default: 0 on 5.6-6.1, as
 * those versions report by default, else 1), FAKE_HIP_FAIL=name:code and
 * FAKE_HIP_FAIL_INVALIDATES (core.c).
 *
 * Compile with -DFAKE_HIP_RUNTIME_VERSION=N to fix the version whatever
 * the environment says, and -DFAKE_NO_GRAPH_MEM_TRIM to leave
 * hipDeviceGraphMemTrim out (5.2.3's header does not declare it). */
#define _GNU_SOURCE
#define RT(x) hip##x
#define RTS(x) "hip" #x
#define ENVN(x) "FAKE_HIP_" x
#define HOST_ALLOC hipHostMalloc
#define HOST_ALLOC_S "hipHostMalloc"
#define HOST_FREE hipHostFree
#define HOST_FREE_S "hipHostFree"
#include <stdlib.h>
static int hip_version(void) {
#ifdef FAKE_HIP_RUNTIME_VERSION
  return FAKE_HIP_RUNTIME_VERSION;
#else
  const char *v = getenv("FAKE_HIP_VERSION");
  return v && *v ? atoi(v) : 60100000;
#endif
}
/* Graph allocation nodes arrived in ROCm 5.5: before, hipMallocAsync in a
 * capture allocates at once and the graph does not own the memory. */
static int pool_capture_nodes(void) { return hip_version() >= 50500000; }
/* Not known for ROCm (no AMD GPU here); CUDA refuses it (801). */
static int exportable_pool_capture_refused(void) { return 0; }
/* hipIpcMemLazyEnablePeerAccess, which hipIpcOpenMemHandle's flags "must
 * be specified as": 0 in 5.x (hip_runtime_api.h 5.2.3), 1 from 6.0. */
static unsigned ipc_open_flags(void) { return hip_version() >= 60000000 ? 1 : 0; }
#include "core.c"

typedef rtError_t hipError_t;

static hipError_t device_usable(void) { return ndevices() == 0 ? 100 : 0; }

hipError_t hipRuntimeGetVersion(int *v) { ENTER("hipRuntimeGetVersion"); *v = hip_version(); RETURN(0); }
/* In ROCm it reports the HIP version again, GPU or not. */
hipError_t hipDriverGetVersion(int *v) { ENTER("hipDriverGetVersion"); *v = hip_version(); RETURN(0); }
const char *hipGetErrorName(hipError_t e) {
  switch (e) {
  case 0: return "hipSuccess";
  case 1: return "hipErrorInvalidValue";
  case 2: return "hipErrorOutOfMemory";
  case 21: return "hipErrorInvalidMemcpyDirection";
  case 100: return "hipErrorNoDevice";
  case 101: return "hipErrorInvalidDevice";
  case 205: return "hipErrorMapFailed";
  case 400: return "hipErrorInvalidHandle";
  case 401: return "hipErrorIllegalState";
  case 600: return "hipErrorNotReady";
  case 712: return "hipErrorHostMemoryAlreadyRegistered";
  case 713: return "hipErrorHostMemoryNotRegistered";
  case 801: return "hipErrorNotSupported";
  case 900: return "hipErrorStreamCaptureUnsupported";
  case 901: return "hipErrorStreamCaptureInvalidated";
  case 906: return "hipErrorStreamCaptureImplicit";
  case 908: return "hipErrorStreamCaptureWrongThread";
  }
  return "hipErrorUnknown";
}
/* 5.2.3's hipGetErrorString returns the name (measured: Debian's
 * libamdhip64.so.5 without a GPU). */
const char *hipGetErrorString(hipError_t e) { return hipGetErrorName(e); }
hipError_t hipGetDeviceCount(int *n) {
  ENTER("hipGetDeviceCount");
  logf_("hipGetDeviceCount");
  *n = 0;
  hipError_t e = device_usable();
  if (e) RETURN(e);
  *n = ndevices();
  RETURN(0);
}
hipError_t hipSetDevice(int d) {
  ENTER("hipSetDevice");
  if (d < 0 || d >= ndevices()) RETURN(101);
  cur_device = d;
  logf_("hipSetDevice %d", d);
  RETURN(0);
}
/* hipDeviceAttribute_t (hip_runtime_api.h): 16 is
 * hipDeviceAttributeIntegrated, 88 hipDeviceAttributeMemoryPoolsSupported. */
hipError_t hipDeviceGetAttribute(int *v, int attr, int dev) {
  ENTER("hipDeviceGetAttribute");
  logf_("hipDeviceGetAttribute attr=%d device=%d", attr, dev);
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  int ver = hip_version();
  int pools = envint("FAKE_HIP_POOLS_ATTR", ver >= 50600000 && ver < 60200000 ? 0 : 1);
  *v = attr == 88 ? pools : attr == 16 ? envint("FAKE_HIP_INTEGRATED", 0) : 0;
  RETURN(0);
}
hipError_t hipDeviceGetName(char *name, int len, int dev) {
  ENTER("hipDeviceGetName");
  logf_("hipDeviceGetName len=%d device=%d", len, dev);
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  if (!name || len <= 0) RETURN(1);
  snprintf(name, len, "Fake AMD GPU %d", dev);
  RETURN(0);
}
hipError_t hipDeviceTotalMem(size_t *bytes, int dev) {
  ENTER("hipDeviceTotalMem");
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  *bytes = envll("FAKE_HIP_MEM", 1LL << 30);
  RETURN(0);
}
hipError_t hipMemGetInfo(size_t *fr, size_t *total) {
  ENTER("hipMemGetInfo");
  if (device_usable()) RETURN(101);
  *total = envll("FAKE_HIP_MEMINFO_TOTAL", envll("FAKE_HIP_MEM", 1LL << 30));
  *fr = *total > live_bytes + graph_cached ? *total - live_bytes - graph_cached : 0;
  logf_("hipMemGetInfo");
  RETURN(0);
}
