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
 * FAKE_HIP_PAGEABLE_ACCESS (hipDeviceAttributePageableMemoryAccess; core.c's
 * kernels then read unregistered host memory), FAKE_HIP_HOST_PAGE_TABLES
 * (hipDeviceAttributePageableMemoryAccessUsesHostPageTables, default: what
 * FAKE_HIP_PAGEABLE_ACCESS says; 0 with FAKE_HIP_PAGEABLE_ACCESS=1 is an
 * HMM device),
 * FAKE_HIP_MEMINFO_TOTAL, FAKE_HIP_POOLS_ATTR (what
 * hipDeviceAttributeMemoryPoolsSupported reports; default: 0 on 5.6-6.1, as
 * those versions report by default, else 1), FAKE_HIP_FAIL=name:code and
 * FAKE_HIP_FAIL_INVALIDATES (core.c), FAKE_HIP_MAX_THREADS
 * (hipDeviceAttributeMaxThreadsPerBlock, default 64), FAKE_HIP_SMS
 * (hipDeviceAttributeMultiprocessorCount, default 4),
 * FAKE_HIP_BLOCKS_PER_SM / FAKE_HIP_THREADS_PER_SM (what
 * hipModuleOccupancyMaxActiveBlocksPerMultiprocessor answers: core.c),
 * FAKE_HIP_NO_P2P (device pairs without peer access: core.c), FAKE_HIP_ARCH (the
 * gcnArchName, default gfx90a:sramecc+:xnack-), FAKE_HIP_WALL_CLOCK_KHZ
 * (hipDeviceAttributeWallClockRate, default 1000000: the kernels' host
 * timer counts nanoseconds; 0: the attribute is refused, as by a runtime
 * that lacks it), FAKE_HIP_VM_GRANULARITY and FAKE_HIP_NO_VM (virtual
 * memory: core.c).
 *
 * Compile with -DFAKE_HIP_RUNTIME_VERSION=N to fix the version whatever
 * the environment says, -DFAKE_NO_GRAPH_MEM_TRIM to leave
 * hipDeviceGraphMemTrim out (5.2.3's header does not declare it), and
 * -DFAKE_NO_PROPS_R0600 to leave hipGetDevicePropertiesR0600 out (ROCm 5
 * has only hipGetDeviceProperties), -DFAKE_NO_VM_API to leave the virtual
 * memory calls (hipMem*) out, -DFAKE_NO_OCCUPANCY to leave
 * hipModuleOccupancyMaxActiveBlocksPerMultiprocessor out (optional). */
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
/* hip_runtime_api.h (ROCm 5.2.3) has no misaligned-address code (AMD GPUs
 * in ROCm's default unaligned mode tolerate most such accesses); the fake
 * holds the kernels to CUDA's rule, since the same source runs on both,
 * and fails the launch with hipErrorLaunchFailure = 719, "an exception
 * occurred on the device while executing a kernel". */
static int misaligned_code(void) { return 719; }
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
  case 200: return "hipErrorInvalidImage";
  case 201: return "hipErrorInvalidContext";
  case 205: return "hipErrorMapFailed";
  case 209: return "hipErrorNoBinaryForGpu";
  case 218: return "hipErrorInvalidKernelFile";
  case 400: return "hipErrorInvalidHandle";
  case 401: return "hipErrorIllegalState";
  case 500: return "hipErrorNotFound";
  case 600: return "hipErrorNotReady";
  case 700: return "hipErrorIllegalAddress";
  case 701: return "hipErrorLaunchOutOfResources";
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
hipError_t hipGetDevice(int *d) {
  if (!d) return 1;
  *d = cur_device;
  return 0;
}
hipError_t hipSetDevice(int d) {
  ENTER("hipSetDevice");
  if (d < 0 || d >= ndevices()) RETURN(101);
  cur_device = d;
  logf_("hipSetDevice %d", d);
  RETURN(0);
}
/* hipDeviceAttribute_t (hip_runtime_api.h): 16 is
 * hipDeviceAttributeIntegrated, 56 MaxThreadsPerBlock, 63
 * MultiprocessorCount, 65 PageableMemoryAccess, 66
 * PageableMemoryAccessUsesHostPageTables, 88 MemoryPoolsSupported; 10017 WallClockRate (kHz;
 * ROCm 6's header, not 5.2.3's). */
hipError_t hipDeviceGetAttribute(int *v, int attr, int dev) {
  ENTER("hipDeviceGetAttribute");
  logf_("hipDeviceGetAttribute attr=%d device=%d", attr, dev);
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  int ver = hip_version();
  int pools = envint("FAKE_HIP_POOLS_ATTR", ver >= 50600000 && ver < 60200000 ? 0 : 1);
  switch (attr) {
  case 16: *v = envint("FAKE_HIP_INTEGRATED", 0); break;
  case 65: *v = envint("FAKE_HIP_PAGEABLE_ACCESS", 0); break;
  case 66: *v = envint("FAKE_HIP_HOST_PAGE_TABLES", envint("FAKE_HIP_PAGEABLE_ACCESS", 0)); break;
  case 56: *v = max_threads(); break;
  case 63: *v = multiprocessors(); break;
  case 88: *v = pools; break;
  case 10017:
    *v = envint("FAKE_HIP_WALL_CLOCK_KHZ", 1000000);
    if (!*v) RETURN(1);
    break;
  default: *v = 0;
  }
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
  *fr = *total > live_bytes + held() ? *total - live_bytes - held() : 0;
  logf_("hipMemGetInfo");
  RETURN(0);
}

/* ---- device properties: only name and gcnArchName are filled ----
 * hipGetDeviceProperties is the ROCm 5 layout (hipDeviceProp_t of 5.2.3's
 * header: 792 bytes, gcnArchName[256] at 396), which ROCm 6's library
 * still exports under that name; hipGetDevicePropertiesR0600 is ROCm 6's
 * (gcnArchName at 1160 of 1472 bytes, as LLVM's offload-arch reads it). */
static const char *arch(void) {
  const char *a = getenv("FAKE_HIP_ARCH");
  return a && *a ? a : "gfx90a:sramecc+:xnack-";
}
static hipError_t props(const char *fn, char *p, int dev, size_t size, size_t arch_at) {
  ENTER(fn);
  logf_("%s device=%d", fn, dev);
  if (!p) RETURN(1);
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  memset(p, 0, size);
  snprintf(p, 256, "Fake AMD GPU %d", dev);
  snprintf(p + arch_at, 256, "%s", arch());
  RETURN(0);
}
hipError_t hipGetDeviceProperties(char *p, int dev) { return props("hipGetDeviceProperties", p, dev, 792, 396); }
#ifndef FAKE_NO_PROPS_R0600
hipError_t hipGetDevicePropertiesR0600(char *p, int dev) { return props("hipGetDevicePropertiesR0600", p, dev, 1472, 1160); }
#endif

/* ---- hiprtc (hiprtc.h; in ROCm 5.x libamdhip64 exports it) ----
 * The fake "compiles" by checking the options and that the source is
 * self-contained (no #include "...": hiprtc is given no include path), and
 * gives a code object of its own: "FAKEHIPCO <arch>\n" and the source,
 * NUL-terminated, which hipModuleLoadData accepts for a device of that
 * processor. hiprtcResult: 0 success, 3 invalid input, 4 invalid program,
 * 5 invalid option, 6 compilation. */
typedef struct { char *src, *code, *log; } fakeprog_t;
static int hiprtc_put(char **dst, const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 1;
  if (!(*dst = malloc(n))) return 1;
  snprintf(*dst, n, "%s%s", a, b);
  return 0;
}
int hiprtcVersion(int *major, int *minor) {
  if (!major || !minor) return 3;
  *major = hip_version() / 10000000;
  *minor = hip_version() / 100000 % 100;
  return 0;
}
const char *hiprtcGetErrorString(int r) {
  switch (r) {
  case 0: return "HIPRTC_SUCCESS";
  case 3: return "HIPRTC_ERROR_INVALID_INPUT";
  case 4: return "HIPRTC_ERROR_INVALID_PROGRAM";
  case 5: return "HIPRTC_ERROR_INVALID_OPTION";
  case 6: return "HIPRTC_ERROR_COMPILATION";
  }
  return "HIPRTC_ERROR_INTERNAL_ERROR";
}
int hiprtcCreateProgram(fakeprog_t **prog, const char *src, const char *name, int nheaders, const char **headers,
                        const char **includes) {
  ENTER("hiprtcCreateProgram");
  logf_("hiprtcCreateProgram name=%s bytes=%zu headers=%d", name ? name : "(null)", src ? strlen(src) : 0, nheaders);
  (void)headers, (void)includes;
  if (!prog || !src || nheaders < 0) RETURN(3);
  fakeprog_t *p = calloc(1, sizeof *p);
  if (!p || !(p->src = strdup(src))) { free(p); RETURN(1); }
  *prog = p;
  RETURN(0);
}
int hiprtcCompileProgram(fakeprog_t *p, int nopts, const char **opts) {
  ENTER("hiprtcCompileProgram");
  if (!p) RETURN(4);
  const char *target = NULL;
  for (int i = 0; i < nopts; i++) {
    logf_("hiprtcCompileProgram option %s", opts[i]);
    if (strncmp(opts[i], "--offload-arch=", 15) == 0) target = opts[i] + 15;
  }
  free(p->log); p->log = NULL;
  free(p->code); p->code = NULL;
  if (!target || !*target) { hiprtc_put(&p->log, "fake hiprtc: no --offload-arch=", ""); RETURN(5); }
  if (strstr(p->src, "#include \"")) { hiprtc_put(&p->log, "fake hiprtc: the source includes a file: ", "no include path is given"); RETURN(6); }
  char head[300];
  snprintf(head, sizeof head, "FAKEHIPCO %s\n", target);
  if (hiprtc_put(&p->code, head, p->src)) RETURN(1);
  RETURN(0);
}
int hiprtcGetCodeSize(fakeprog_t *p, size_t *n) {
  if (!p || !n) return 3;
  if (!p->code) return 4;
  *n = strlen(p->code) + 1;
  return 0;
}
int hiprtcGetCode(fakeprog_t *p, char *out) {
  if (!p || !out) return 3;
  if (!p->code) return 4;
  memcpy(out, p->code, strlen(p->code) + 1);
  return 0;
}
int hiprtcGetProgramLogSize(fakeprog_t *p, size_t *n) {
  if (!p || !n) return 3;
  *n = p->log ? strlen(p->log) + 1 : 1;
  return 0;
}
int hiprtcGetProgramLog(fakeprog_t *p, char *out) {
  if (!p || !out) return 3;
  strcpy(out, p->log ? p->log : "");
  return 0;
}
int hiprtcDestroyProgram(fakeprog_t **p) {
  if (!p || !*p) return 3;
  free((*p)->src); free((*p)->code); free((*p)->log); free(*p);
  *p = NULL;
  return 0;
}

/* ---- modules and launches (hip_runtime_api.h) ----
 * hipModuleLoadData takes the fake hiprtc's code object: 200 (invalid
 * image) for anything else, 209 (no binary for the GPU) when it was built
 * for another processor than the current device's. A kernel is a
 * "CA_KERNEL name(" in its source. A launch needs the module's device
 * current on the calling thread and a stream of that device (400
 * otherwise): stricter than HIP is known to be (it may go by the stream's
 * device), and what the driver does anyway. */
static int same_processor(const char *a, const char *b) {
  size_t na = strcspn(a, ":\n"), nb = strcspn(b, ":\n");
  return na == nb && strncmp(a, b, na) == 0;
}
hipError_t hipModuleLoadData(void **m, const void *image) {
  ENTER("hipModuleLoadData");
  if (!m || !image) RETURN(1);
  const char *co = image;
  logf_("hipModuleLoadData bytes=%zu", strlen(co));
  if (strncmp(co, "FAKEHIPCO ", 10) != 0) RETURN(200);
  if (!same_processor(co + 10, arch())) RETURN(209);
  RETURN(module_load_(m, co, NULL, cur_device));
}
/* a kernel the source defines: CA_KERNEL name( or CA_KERNEL_ALIGNED name( */
static int source_has(const char *image, const char *name) {
  return has_text(image, "CA_KERNEL ", name, "(") || has_text(image, "CA_KERNEL_ALIGNED ", name, "(");
}
hipError_t hipModuleGetFunction(void **f, void *m, const char *name) {
  ENTER("hipModuleGetFunction");
  logf_("hipModuleGetFunction %p %s", m, name ? name : "(null)");
  RETURN(function_get_(f, m, name, source_has));
}
hipError_t hipModuleUnload(void *m) {
  ENTER("hipModuleUnload");
  logf_("hipModuleUnload %p", m);
  RETURN(module_unload_(m));
}
hipError_t hipModuleLaunchKernel(void *fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void *h, void **params, void **extra) {
  ENTER("hipModuleLaunchKernel");
  function_t *f = function_of(fh);
  if (!f) RETURN(400);
  stream_t *s = stream_of(h);
  if (cur_device != f->m->device || (s && s->device != f->m->device)) {
    logf_("hipModuleLaunchKernel %s: device %d is not the module's %d", f->name, cur_device, f->m->device);
    RETURN(400);
  }
  RETURN(launch_("hipModuleLaunchKernel", f, gx, gy, gz, bx, by, bz, shared, h, params, extra));
}
#ifndef FAKE_NO_OCCUPANCY
hipError_t hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(int *n, void *f, int block, size_t shared) {
  ENTER("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
  RETURN(occupancy_("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", n, f, block, shared));
}
#endif

#ifndef FAKE_NO_VM_API
/* Virtual memory (core.c's rules). hipMemAllocationProp's layout changed
 * in 5.3 (hip/vm.go): before, compressionType at 0, location type at 4
 * and id at 8, requestedHandleType at 12, type at 16; from 5.3, CUDA's:
 * type at 0, requestedHandleType(s) at 4, location type at 8 and id at 12.
 * The fake reads the layout of the version it reports, so a driver that
 * builds the wrong one gets 1 (invalid value). hipMemAccessDesc: location
 * type at 0, id at 4, flags at 8. */
static hipError_t hip_prop(const unsigned char *prop, int *device) {
  if (!prop) return 1;
  int type, loctype, locid;
  if (hip_version() < 50300000) {
    memcpy(&loctype, prop + 4, 4); memcpy(&locid, prop + 8, 4); memcpy(&type, prop + 16, 4);
  } else {
    memcpy(&type, prop, 4); memcpy(&loctype, prop + 8, 4); memcpy(&locid, prop + 12, 4);
  }
  if (device) *device = locid;
  return vm_prop_ok(type, loctype, locid);
}
hipError_t hipMemGetAllocationGranularity(size_t *g, const unsigned char *prop, int option) {
  ENTER("hipMemGetAllocationGranularity");
  logf_("hipMemGetAllocationGranularity option=%d", option);
  hipError_t e = hip_prop(prop, NULL);
  RETURN(e ? e : vm_granularity_(g, option));
}
hipError_t hipMemAddressReserve(void **p, size_t n, size_t align, void *addr, unsigned long long flags) {
  ENTER("hipMemAddressReserve");
  logf_("hipMemAddressReserve size=%zu alignment=%zu addr=%p flags=%llu", n, align, addr, flags);
  RETURN(vm_reserve_(p, n, align, addr, flags));
}
hipError_t hipMemAddressFree(void *p, size_t n) {
  ENTER("hipMemAddressFree");
  logf_("hipMemAddressFree %p size=%zu", p, n);
  RETURN(vm_free_(p, n));
}
hipError_t hipMemCreate(void **h, size_t n, const unsigned char *prop, unsigned long long flags) {
  ENTER("hipMemCreate");
  logf_("hipMemCreate size=%zu flags=%llu", n, flags);
  int dev;
  hipError_t e = hip_prop(prop, &dev);
  RETURN(e ? e : vm_create_(h, n, dev, flags));
}
hipError_t hipMemRelease(void *h) {
  ENTER("hipMemRelease");
  logf_("hipMemRelease %p", h);
  RETURN(vm_release_(h));
}
hipError_t hipMemMap(void *p, size_t n, size_t offset, void *h, unsigned long long flags) {
  ENTER("hipMemMap");
  logf_("hipMemMap %p size=%zu offset=%zu handle=%p flags=%llu", p, n, offset, h, flags);
  RETURN(vm_map_(p, n, offset, h, flags));
}
hipError_t hipMemUnmap(void *p, size_t n) {
  ENTER("hipMemUnmap");
  logf_("hipMemUnmap %p size=%zu", p, n);
  RETURN(vm_unmap_(p, n));
}
hipError_t hipMemSetAccess(void *p, size_t n, const int *desc, size_t count) {
  ENTER("hipMemSetAccess");
  if (!desc) RETURN(1);
  logf_("hipMemSetAccess %p size=%zu location=%d:%d flags=%d count=%zu", p, n, desc[0], desc[1], desc[2], count);
  RETURN(vm_set_access_(p, n, desc[0], desc[1], desc[2], count));
}
#endif /* FAKE_NO_VM_API */

/* hipMemPrefetchAsync(const void *dev_ptr, size_t count, int device,
 * hipStream_t stream), hipCpuDeviceId (-1) for the host
 * (hip_runtime_api.h, 5.2.3). */
hipError_t hipMemPrefetchAsync(const void *p, size_t n, int device, void *h) {
  ENTER("hipMemPrefetchAsync");
  logf_("hipMemPrefetchAsync %p n=%zu device=%d stream=%p", p, n, device, h);
  RETURN(prefetch_(p, n, device, h));
}
