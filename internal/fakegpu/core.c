/* The runtime-independent core of the fake GPU runtimes used in tests
 * (cuda/testdata/fakecudart.c, hip/testdata/fakehip.c). Each front file
 * defines its runtime's names and then includes this file; gcc finds it
 * with -I internal/fakegpu (gpurttest.Commands).
 *
 * Semantics: device memory is host memory, streams execute at once,
 * captures record into a graph that replays on launch, and the capture
 * rules (unsafe calls, same-thread end, pinned copies) are enforced. Every
 * call is logged with its arguments and the calling thread's current
 * device, so tests check the marshalling (argument order, memcpy kinds,
 * flags) through purego.
 *
 * Kernels: the fakes link the host build of internal/kernels/collectives.cu
 * (g++; gpurttest.Commands gives the command lines) and run its kernels,
 * every block on a worker thread, its threads fibers, every access
 * checked as a GPU would (fake_access, below). A launch runs SYNCHRONOUSLY in the
 * launching thread, as everything on the fake's streams does, but WITHOUT
 * holding the fake's lock: a collective's barrier waits for the kernels of
 * the other ranks, which must be able to copy and launch from their own
 * threads meanwhile. So ranks need threads (goroutines) of their own: two
 * ranks launching a barrier from one thread would wait for each other
 * until the kernels' timeout. A launch on a capturing stream records a
 * kernel node, with a copy of the parameter (the runtimes copy it at
 * launch), that every launch of the graph runs, again without the lock.
 *
 * The numeric error codes used here have the same value and meaning in
 * CUDA's driver_types.h (enum cudaError) and HIP's hip_runtime_api.h (enum
 * hipError_t, ROCm 5.2.3 as installed by Debian's libamdhip64-dev):
 * 1 invalid value, 2 out of memory, 21 invalid memcpy direction,
 * 101 invalid device, 400 invalid (resource) handle, 401 illegal state,
 * 712/713 host memory already/not registered, 900 stream capture
 * unsupported, 901 invalidated, 906 implicit, 908 wrong thread. So do the
 * enums this file reads: memcpy kinds 1-3, capture modes 0-2 and statuses
 * 0-2, the pool attribute release threshold 4, the pool allocation type
 * pinned 1, location type device 1, handle types none 0 and POSIX file
 * descriptor 1, the stream flag non-blocking 1, the instantiate flag
 * auto-free-on-launch 1, and the 88-byte pool properties struct.
 *
 * A front file defines, before including this:
 *   RT(x), RTS(x)    the function name and its string ("cuda" #x)
 *   ENVN(x)          an environment variable name ("FAKE_CUDA_" x)
 *   HOST_ALLOC, HOST_FREE    the pinned host alloc/free functions' names,
 *   HOST_ALLOC_S, HOST_FREE_S and their strings
 *   static int pool_capture_nodes(void)  1 when a pool allocation in a
 *                    capture becomes a graph node (0: allocated at once)
 *   static int exportable_pool_capture_refused(void)  1 when a pool created
 *                    with a shareable handle type refuses allocations in a
 *                    capture (801, not supported)
 *   static unsigned ipc_open_flags(void) the flags RT(IpcOpenMemHandle)
 *                    requires (its header: "must be specified as
 *                    ...IpcMemLazyEnablePeerAccess")
 *   static int misaligned_code(void) the code a kernel's misaligned access
 *                    fails its launch with
 * and may define FAKE_NO_GRAPH_MEM_TRIM to leave RT(DeviceGraphMemTrim)
 * out (an optional symbol for the binding), FAKE_NO_LAUNCH_HOST_FUNC to
 * leave RT(LaunchHostFunc) out.
 *
 * The module and launch entry points differ in name and in what they check
 * (cuda.h's cuModule* and cuLaunchKernel check the current context; HIP's
 * hipModule* take a code object from hiprtc), so each front defines them
 * on the helpers below (module_load_, function_get_, module_unload_,
 * launch_). Their codes also agree in both headers: 200 invalid image,
 * 201 invalid context, 209 no binary for the GPU, 218 invalid PTX /
 * kernel file, 500 not found, 701 launch out of resources. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

typedef int rtError_t;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int cur_device = 0;

static int envint(const char *n, long long def) {
  const char *v = getenv(n);
  return v && *v ? atoll(v) : def;
}
static long long envll(const char *n, long long def) {
  const char *v = getenv(n);
  return v && *v ? atoll(v) : def;
}
static int ndevices(void) { return envint(ENVN("DEVICES"), 1); }

/* ---- call log ---- */
static char logbuf[1 << 20];
static size_t loglen;
static void logf_(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(logbuf + loglen, sizeof logbuf - loglen, "dev=%d ", cur_device);
  if (n > 0 && loglen + n < sizeof logbuf) loglen += n;
  n = vsnprintf(logbuf + loglen, sizeof logbuf - loglen, fmt, ap);
  if (n > 0 && loglen + n < sizeof logbuf - 1) { loglen += n; logbuf[loglen++] = '\n'; }
  va_end(ap);
}
size_t fake_log(char *out, size_t n) {
  pthread_mutex_lock(&mu);
  size_t m = loglen < n ? loglen : n;
  memcpy(out, logbuf, m);
  pthread_mutex_unlock(&mu);
  return m;
}
void fake_log_reset(void) { pthread_mutex_lock(&mu); loglen = 0; pthread_mutex_unlock(&mu); }

/* ---- graphs and streams ---- */
enum { OP_COPY, OP_SET, OP_FREE, OP_HOST, OP_KERNEL };
/* OP_KERNEL: kernel k on grid blocks of block threads of device, its
 * parameter a copy at dst that the op owns. OP_COPY, OP_SET: on device
 * (the stream's), dev_sides the sides that are device memory (DEV_DST,
 * DEV_SRC: by the copy's kind), checked when the op runs (copy_legal). */
enum { DEV_DST = 1, DEV_SRC = 2 };
typedef struct { int kind; char *dst; const char *src; size_t n; int val; int k; unsigned grid, block; int device; int dev_sides; } op_t;
typedef struct graph { op_t *ops; int nops, cap; int launched; } graph_t;
typedef struct { graph_t *g; unsigned long long flags; } exec_t;
typedef struct stream {
  int device; unsigned flags; int priority;
  int status; /* 0 none, 1 active, 2 invalidated */
  int mode; pthread_t thread; graph_t *g;
  struct stream *next;
} stream_t;
static stream_t *streams;
/* FAKE_<RT>_FAIL=name:code makes that function return code; with
 * FAKE_<RT>_FAIL_INVALIDATES set it also invalidates every active capture. */
static int injected(const char *fn) {
  const char *v = getenv(ENVN("FAIL"));
  size_t l = strlen(fn);
  if (v && strncmp(v, fn, l) == 0 && v[l] == ':') {
    int code = atoi(v + l + 1);
    if (getenv(ENVN("FAIL_INVALIDATES")))
      for (struct stream *s = streams; s; s = s->next) if (s->status == 1) s->status = 2;
    return code;
  }
  return 0;
}

/* free_graph frees a graph and what its ops own (kernel parameters). */
static void free_graph(graph_t *g) {
  for (int i = 0; i < g->nops; i++) if (g->ops[i].kind == OP_KERNEL) free(g->ops[i].dst);
  free(g->ops); free(g);
}

static void record(stream_t *s, op_t o) {
  graph_t *g = s->g;
  if (g->nops == g->cap) { g->cap = g->cap ? 2 * g->cap : 16; g->ops = realloc(g->ops, g->cap * sizeof(op_t)); }
  g->ops[g->nops++] = o;
}

/* ---- allocations ---- */
/* shared: a synchronous allocation (RT(Malloc)) lives in a memfd mapping,
 * so an IPC handle can name it and another process can map it. */
/* device: the device whose memory it is (-1: another process's, imported,
 * reachable from every device as an IPC mapping is). */
/* pool: the memory pool an allocation came from (RT(MallocFromPoolAsync)),
 * NULL for the others. A pool keeps what is freed to it (cached, counted
 * against the device as CUDA's pools are) and gives it back only down to
 * its release threshold at a synchronization, or at RT(MemPoolTrimTo):
 * "cudaMemPoolAttrReleaseThreshold: Amount of reserved memory in bytes to
 * hold onto before trying to release memory back to the OS. When more than
 * the release threshold bytes of memory are held by the memory pool, the
 * allocator will try to release memory back to the OS on the next call to
 * stream, event or context synchronize" (CUDA runtime API, Memory Pools).
 * So memory freed into a pool whose threshold is everything (capalloc's
 * setting) cannot serve a synchronous RT(Malloc) until the pool is trimmed,
 * as on a GPU (measured on an H200, CUDA 13.0: cuda's
 * TestGPUAllocSyncUsesCachedPoolMemory). What a stream-ordered free gives
 * the pool is pending until the host synchronizes (RT(StreamSynchronize)):
 * a trim cannot release it before, and a stream query that finds the
 * stream idle does not count (measured there too: after frees, a query
 * and cudaMemPoolTrimTo(0), cudaMemGetInfo still said 0.3 GB free of
 * 140; after a synchronize, the trim returned it all). */
typedef struct pool_s { int device; int is_default; int handle_types; int imported; unsigned long long threshold; long long cached, pending; struct pool_s *next; } pool_t;
typedef struct { char *p; size_t n; graph_t *owner; int graph_freed; int live; int fd; pool_t *pool; int device; } alloc_t;
static alloc_t allocs[1 << 16];
static int nallocs;
static long long live_bytes;
/* graph_cached: memory graph allocations released at graph destroy, kept
 * for later graphs (reused by graph allocations) and counted against the
 * device until RT(DeviceGraphMemTrim), as CUDA's graph memory is. */
static long long graph_cached;
/* pools_cached: what every pool keeps (pool_t.cached and .pending, summed). */
static long long pools_cached;
static pool_t default_pools[16];
static pool_t *created_pools; /* RT(MemPoolCreate)'s, linked by next */
/* held is the memory the runtime keeps for reuse: it counts against the
 * device as allocations do. */
static long long held(void) { return graph_cached + pools_cached; }
/* pool_keep releases observed memory until p holds at most keep bytes. */
static void pool_keep(pool_t *p, long long keep) {
  long long over = p->cached + p->pending - keep;
  if (over > p->cached) over = p->cached;
  if (over > 0) { pools_cached -= over; p->cached -= over; }
}
/* pool_synchronized: at a synchronization the host observes p's pending
 * frees, and p gives back what it holds over its threshold. */
static void pool_synchronized(pool_t *p) {
  p->cached += p->pending;
  p->pending = 0;
  pool_keep(p, (long long)(p->threshold > (1ULL << 62) ? (1ULL << 62) : p->threshold));
}
/* pools_release is every pool's pool_synchronized. */
static void pools_release(void) {
  for (int i = 0; i < 16; i++) pool_synchronized(&default_pools[i]);
  for (pool_t *p = created_pools; p; p = p->next) pool_synchronized(p);
}
static alloc_t *find(const void *p) {
  for (int i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].p == p) return &allocs[i];
  return NULL;
}
/* access_gen counts the changes that take memory away from kernels (a
 * free, an unmap, an unregister, less access): fake_access's per-thread
 * cache is valid while it stands still. Bumped under mu. */
static unsigned long access_gen = 1;
static void forget(void) { __atomic_add_fetch(&access_gen, 1, __ATOMIC_RELEASE); }
static void release(alloc_t *a) {
  forget();
  if (a->fd >= 0) { munmap(a->p, a->n); close(a->fd); } else free(a->p);
  a->live = 0; live_bytes -= a->n;
}
static rtError_t devalloc_(void **out, size_t n, graph_t *owner, int shared, pool_t *pool, int device) {
  long long reuse = owner ? (graph_cached < (long long)n ? graph_cached : (long long)n) : 0;
  /* A pool's allocation reuses what that pool keeps first. */
  long long preuse = pool && !owner ? (pool->cached + pool->pending < (long long)n ? pool->cached + pool->pending : (long long)n) : 0;
  if (live_bytes + held() - reuse - preuse + (long long)n > envll(ENVN("MEM"), 1LL << 30) || nallocs == (1 << 16)) return 2;
  graph_cached -= reuse;
  if (preuse) {
    long long c = preuse < pool->cached ? preuse : pool->cached;
    pool->cached -= c; pool->pending -= preuse - c; pools_cached -= preuse;
  }
  char *p;
  int fd = -1;
  if (shared) {
    fd = memfd_create("fakegpu", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, n) != 0) { if (fd >= 0) close(fd); return 2; }
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { close(fd); return 2; }
  } else {
    p = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!p) return 2;
  }
  memset(p, 0xAB, n);
  allocs[nallocs++] = (alloc_t){p, n, owner, 0, 1, fd, pool, device};
  live_bytes += n;
  *out = p;
  return 0;
}

/* ---- peer access between devices ----
 * Memory of device e is reachable from work on device d != e (a kernel,
 * a copy, a memset) only once d enabled peer access to e
 * (RT(DeviceEnablePeerAccess) on a thread where d is current), which it
 * can only where RT(DeviceCanAccessPeer) says so: every pair of distinct
 * devices but those FAKE_<RT>_NO_P2P lists ("0-1,2-3": each pair, both
 * ways). Without it the work fails with 700 (illegal address): a kernel
 * faults so on a GPU; a copy there would still work (the runtime stages
 * it), so the fake is stricter than a GPU for copies, which lets the
 * tests see a missing enable in a copy as well as in a kernel. */
static unsigned char peer_on[16][16]; /* [d][e]: d reaches e's memory */
static int no_p2p(int d, int e) {
  const char *v = getenv(ENVN("NO_P2P"));
  for (const char *p = v; p && *p;) {
    int a, b, n;
    if (sscanf(p, "%d-%d%n", &a, &b, &n) != 2) break;
    if ((a == d && b == e) || (a == e && b == d)) return 1;
    p += n;
    if (*p == ',') p++;
  }
  return 0;
}
/* fake_peer_ok: work on device reaches allocation a (called with mu held;
 * the kernel executor's access check calls it too). */
static int fake_peer_ok(int device, const alloc_t *a) {
  return a->device < 0 || a->device == device || (device >= 0 && device < 16 && a->device < 16 && peer_on[device][a->device]);
}
/* alloc_at is the live allocation holding p, or NULL. */
static const alloc_t *alloc_at(const void *p) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].live && (const char *)p >= allocs[i].p && (const char *)p < allocs[i].p + allocs[i].n) return &allocs[i];
  return NULL;
}
/* peer_copy_ok: a copy or memset on device touching [p, p+n) reaches it
 * (host memory and memory no allocation holds are other checks' business). */
static int peer_copy_ok(int device, const void *p, size_t n) {
  if (!p || !n) return 1;
  const alloc_t *a = alloc_at(p);
  if (a && !fake_peer_ok(device, a)) {
    logf_("illegal address: device %d touches %p of device %d without peer access", device, p, a->device);
    return 0;
  }
  return 1;
}

/* reg: host-registered, not ours; managed: RT(MallocManaged)'s, freed
 * with RT(Free) */
typedef struct { char *p; size_t n; int reg; int managed; } host_t;
static host_t hosts[4096];
static int nhosts;
/* host_slot_ is a free entry of hosts (one freed or unregistered is
 * reused, so a long run of pins and frees never fills the table), -1 when
 * all 4096 are live. */
static int host_slot_(void) {
  for (int i = 0; i < nhosts; i++)
    if (!hosts[i].p) return i;
  return nhosts < 4096 ? nhosts++ : -1;
}
static int pinned(const void *p, size_t n) {
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p && (const char *)p >= hosts[i].p && (const char *)p + n <= hosts[i].p + hosts[i].n) return 1;
  return 0;
}

/* unsafe applies CUDA's rule for potentially unsafe calls: refused (900)
 * on a thread with a Global/ThreadLocal capture of its own, or while any
 * Global capture runs; the capture concerned is invalidated. */
static __thread int thread_relaxed; /* RT(ThreadExchangeStreamCaptureMode)(Relaxed) on this thread */
static rtError_t unsafe(void) {
  int refused = 0;
  if (thread_relaxed) return 0;
  for (stream_t *s = streams; s; s = s->next) {
    if (s->status != 1) continue;
    if (s->mode == 0 || (s->mode == 1 && pthread_equal(s->thread, pthread_self()))) { s->status = 2; refused = 1; }
  }
  return refused ? 900 : 0;
}
static stream_t *stream_of(void *h) {
  for (stream_t *s = streams; s; s = s->next) if (s == h) return s;
  return NULL;
}
/* The legacy default stream: handle 0 or the legacy handle ((stream_t)0x1). */
static int is_legacy(void *h) { return h == NULL || h == (void *)1; }

/* legacy applies the legacy-stream rule, as measured on an H100 (driver
 * 580, runtime 13.0, cmd/cudatruth copy_pageable_sync): a stream created
 * without the non-blocking flag synchronizes implicitly with the legacy
 * stream. While such a stream captures, in any mode, work on the legacy
 * stream would depend on the capture: it is refused with 906 (implicit)
 * and the capture is invalidated. Work on another stream, blocking or not,
 * is not affected (memset_other: 0), and a non-blocking stream's capture is
 * outside the rule. s is NULL for the legacy stream. */
static rtError_t legacy(stream_t *s) {
  if (s) return 0;
  int refused = 0;
  for (stream_t *t = streams; t; t = t->next)
    if (t->status == 1 && !(t->flags & 1)) { t->status = 2; refused = 1; }
  return refused ? 906 : 0;
}

/* Lost devices. A kernel's fault (run_kernel) destroys its device's
 * context, as on a GPU, where "any further CUDA work will return the same
 * error": from then on every call on that device (the calling thread's
 * current one) fails with the fault's code, except those that need no
 * context (versions, device count and attributes, choosing the device,
 * the driver's context queries, hiprtc), until fake_reset_faults, which
 * tests call to go on with a device. */
#define LOST_DEVICES 16
static int lost[LOST_DEVICES];
static rtError_t lost_code(const char *name) {
  static const char *const no_context[] = {"DriverGetVersion", "RuntimeGetVersion", "GetDeviceCount", "SetDevice", "DeviceGetAttribute",
                                           "DeviceGetName", "DeviceTotalMem", "cuInit", "cuDeviceGet", "cuCtxGetCurrent",
                                           "cuCtxSetCurrent", "cuDevicePrimaryCtxRetain", "hiprtc"};
  if (cur_device < 0 || cur_device >= LOST_DEVICES || !lost[cur_device]) return 0;
  for (size_t i = 0; i < sizeof no_context / sizeof no_context[0]; i++) if (strstr(name, no_context[i])) return 0;
  return lost[cur_device];
}
void fake_reset_faults(void) { pthread_mutex_lock(&mu); memset(lost, 0, sizeof lost); pthread_mutex_unlock(&mu); }

#define ENTER(name) pthread_mutex_lock(&mu); rtError_t inj_ = injected(name); if (inj_) { logf_("%s injected=%d", name, inj_); pthread_mutex_unlock(&mu); return inj_; } \
  rtError_t lost_ = lost_code(name); if (lost_) { logf_("%s: device %d lost by a kernel fault: %d", name, cur_device, lost_); pthread_mutex_unlock(&mu); return lost_; }
#define RETURN(e) do { rtError_t r_ = (e); pthread_mutex_unlock(&mu); return r_; } while (0)

rtError_t RT(StreamCreateWithPriority)(void **out, unsigned flags, int prio) {
  ENTER(RTS(StreamCreateWithPriority));
  stream_t *s = calloc(1, sizeof *s);
  s->device = cur_device; s->flags = flags; s->priority = prio;
  s->next = streams; streams = s;
  *out = s;
  logf_(RTS(StreamCreateWithPriority) " flags=%u priority=%d -> %p", flags, prio, (void *)s);
  RETURN(0);
}
rtError_t RT(StreamDestroy)(void *h) {
  ENTER(RTS(StreamDestroy));
  stream_t **pp = &streams;
  while (*pp && *pp != h) pp = &(*pp)->next;
  if (!*pp) RETURN(400);
  *pp = ((stream_t *)h)->next;
  logf_(RTS(StreamDestroy) " %p", h);
  free(h);
  RETURN(0);
}
static rtError_t sync_like(void *h) {
  if (is_legacy(h)) { rtError_t e = legacy(NULL); return e ? e : unsafe(); }
  stream_t *s = stream_of(h);
  if (!s) return 400;
  if (s->status) { s->status = 2; return 900; }
  rtError_t e = legacy(s);
  return e ? e : unsafe();
}
/* A synchronization is where the host observes the pools' pending frees
 * and they give back what is over their thresholds (pools_release); a
 * query is not. */
rtError_t RT(StreamSynchronize)(void *h) {
  ENTER(RTS(StreamSynchronize));
  logf_(RTS(StreamSynchronize) " %p", h);
  rtError_t e = sync_like(h);
  if (!e) pools_release();
  RETURN(e);
}
rtError_t RT(StreamQuery)(void *h) { ENTER(RTS(StreamQuery)); logf_(RTS(StreamQuery) " %p", h); RETURN(sync_like(h)); }
rtError_t RT(StreamIsCapturing)(void *h, int *st) {
  ENTER(RTS(StreamIsCapturing));
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  *st = s->status;
  RETURN(0);
}

rtError_t RT(Malloc)(void **p, size_t n) {
  ENTER(RTS(Malloc));
  logf_(RTS(Malloc) " n=%zu", n);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  RETURN(devalloc_(p, n, NULL, 1, NULL, cur_device));
}

/* ---- virtual memory: reservations, physical handles, mappings ----
 * The runtime-independent half of cuMem* / hipMem*; each front defines the
 * entry points (names, the properties struct's layout, what they check of
 * the thread) on the helpers below, as CUDA documents the rules:
 * reservations, handle sizes, mapped ranges and offsets are multiples of
 * the granularity (FAKE_<RT>_VM_GRANULARITY, default 2 MiB; with
 * FAKE_<RT>_NO_VM set the granularity query fails with 801, not
 * supported, as on a device without virtual memory); create takes pinned
 * memory on an existing device and counts against FAKE_<RT>_MEM with
 * every allocation; a handle maps at offset 0, over a range of one
 * reservation where nothing is mapped; a mapping starts inaccessible until
 * set access covers it; unmap takes exactly one mapping's range; memory is
 * freed once its handle is released and it is unmapped; a reservation is
 * freed whole, with nothing mapped. The memory is a memfd per handle,
 * mapped MAP_FIXED into a PROT_NONE reservation; copies and memsets that
 * touch a reservation anywhere not mapped and accessible fail with 700
 * (illegal address) instead of faulting. */
typedef struct vmhandle { int fd; size_t n; int device, mapped, released; struct vmhandle *next; } vmhandle_t;
typedef struct vmmap { size_t off, n; vmhandle_t *h; int access; struct vmmap *next; } vmmap_t;
typedef struct vmres { char *base; size_t n; vmmap_t *maps; struct vmres *next; } vmres_t;
static vmres_t *vmres;
static vmhandle_t *vmhandles;

static size_t vm_granularity(void) { return (size_t)envll(ENVN("VM_GRANULARITY"), 2LL << 20); }
static vmres_t *vm_res_of(const void *p) {
  for (vmres_t *r = vmres; r; r = r->next)
    if ((const char *)p >= r->base && (const char *)p < r->base + r->n) return r;
  return NULL;
}
static vmhandle_t *vm_handle_of(void *h) {
  for (vmhandle_t *x = vmhandles; x; x = x->next) if (x == h) return x;
  return NULL;
}
/* vm_access_ok: [p, p+n) touches no reservation, or lies in mappings with
 * access (want 1: read-write; 0: read). */
static int vm_access_ok(const void *p, size_t n, int write) {
  for (vmres_t *r = vmres; r; r = r->next) {
    const char *a = p, *b = (const char *)p + n;
    if (b <= r->base || a >= r->base + r->n) continue;
    if (a < r->base || b > r->base + r->n) return 0;
    size_t at = a - r->base, end = b - r->base;
    while (at < end) {
      vmmap_t *m = r->maps;
      while (m && !(m->off <= at && at < m->off + m->n)) m = m->next;
      if (!m || m->access == 0 || (write && m->access != 3)) return 0;
      at = m->off + m->n;
    }
  }
  return 1;
}
static void vm_drop_handle(vmhandle_t *h) {
  if (!h->released || h->mapped) return;
  close(h->fd); live_bytes -= h->n;
  for (vmhandle_t **pp = &vmhandles; *pp; pp = &(*pp)->next) if (*pp == h) { *pp = h->next; break; }
  free(h);
}
/* The property checks every front makes: pinned (1) on a device (1) that
 * exists. */
static rtError_t vm_prop_ok(int type, int loctype, int locid) {
  return type == 1 && loctype == 1 && locid >= 0 && locid < ndevices() ? 0 : 1;
}
static rtError_t vm_granularity_(size_t *out, int option) {
  if (!out || (option != 0 && option != 1)) return 1;
  if (getenv(ENVN("NO_VM"))) return 801;
  *out = vm_granularity();
  return 0;
}
static rtError_t vm_reserve_(void **out, size_t n, size_t align, void *addr, unsigned long long flags) {
  size_t g = vm_granularity();
  if (!out || n == 0 || n % g || flags || (align && align % g)) return 1;
  (void)addr; /* a hint */
  if (!align) align = g;
  char *p = mmap(NULL, n + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return 2;
  char *base = (char *)(((uintptr_t)p + align - 1) / align * align);
  if (base > p) munmap(p, base - p);
  if (base + n < p + n + align) munmap(base + n, p + n + align - (base + n));
  vmres_t *r = calloc(1, sizeof *r);
  r->base = base; r->n = n; r->next = vmres; vmres = r;
  *out = base;
  return 0;
}
static rtError_t vm_free_(void *p, size_t n) {
  for (vmres_t **pp = &vmres; *pp; pp = &(*pp)->next) {
    vmres_t *r = *pp;
    if (r->base != p) continue;
    if (r->n != n || r->maps) return 1;
    munmap(r->base, r->n);
    *pp = r->next; free(r);
    return 0;
  }
  return 1;
}
static rtError_t vm_create_(void **out, size_t n, int device, unsigned long long flags) {
  if (!out || n == 0 || n % vm_granularity() || flags) return 1;
  if (live_bytes + held() + (long long)n > envll(ENVN("MEM"), 1LL << 30)) return 2;
  int fd = memfd_create("fakegpu-vm", MFD_CLOEXEC);
  if (fd < 0) return 2;
  if (ftruncate(fd, n) != 0) { close(fd); return 2; }
  vmhandle_t *h = calloc(1, sizeof *h);
  h->fd = fd; h->n = n; h->device = device; h->next = vmhandles; vmhandles = h;
  live_bytes += n;
  *out = h;
  return 0;
}
static rtError_t vm_release_(void *hp) {
  vmhandle_t *h = vm_handle_of(hp);
  if (!h || h->released) return 1;
  h->released = 1;
  vm_drop_handle(h);
  return 0;
}
static rtError_t vm_map_(void *p, size_t n, size_t offset, void *hp, unsigned long long flags) {
  vmhandle_t *h = vm_handle_of(hp);
  vmres_t *r = vm_res_of(p);
  size_t g = vm_granularity();
  if (!h || h->released || !r || offset || flags || n == 0 || n > h->n) return 1;
  size_t off = (char *)p - r->base;
  if (off % g || n % g || n > r->n - off) return 1;
  for (vmmap_t *m = r->maps; m; m = m->next) if (m->off < off + n && off < m->off + m->n) return 1;
  if (mmap(p, n, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED) return 2;
  vmmap_t *m = calloc(1, sizeof *m);
  m->off = off; m->n = n; m->h = h; m->next = r->maps; r->maps = m;
  h->mapped++;
  return 0;
}
static rtError_t vm_unmap_(void *p, size_t n) {
  vmres_t *r = vm_res_of(p);
  if (!r) return 1;
  size_t off = (char *)p - r->base;
  for (vmmap_t **pp = &r->maps; *pp; pp = &(*pp)->next) {
    vmmap_t *m = *pp;
    if (m->off != off || m->n != n) continue;
    forget();
    mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    *pp = m->next;
    m->h->mapped--;
    vm_drop_handle(m->h);
    free(m);
    return 0;
  }
  return 1;
}
/* vm_set_access_: one descriptor (location type, id, flags) for the
 * device; the range must be whole adjacent mappings. */
static rtError_t vm_set_access_(void *p, size_t n, int loctype, int locid, int flags, size_t count) {
  vmres_t *r = vm_res_of(p);
  if (!r || count != 1 || loctype != 1 || locid < 0 || locid >= ndevices() || (flags != 0 && flags != 1 && flags != 3)) return 1;
  size_t off = (char *)p - r->base;
  if (n == 0 || n > r->n - off) return 1;
  size_t at = off;
  while (at < off + n) {
    vmmap_t *m = r->maps;
    while (m && m->off != at) m = m->next;
    if (!m) return 1;
    at = m->off + m->n;
  }
  if (at != off + n) return 1;
  int prot = flags == 3 ? PROT_READ | PROT_WRITE : flags == 1 ? PROT_READ : PROT_NONE;
  forget();
  if (mprotect(p, n, prot) != 0) return 1;
  for (vmmap_t *m = r->maps; m; m = m->next)
    if (m->off >= off && m->off + m->n <= off + n) m->access = flags;
  return 0;
}

/* ---- IPC handles (64 bytes: CUDA_IPC_HANDLE_SIZE, HIP_IPC_HANDLE_SIZE) ----
 * The fake's handle: "FAKEIPC" magic, the exporting pid, the memfd's
 * number in that process, the size; the rest zero. Opening maps
 * /proc/<pid>/fd/<fd>, so another process sees the same bytes. Only
 * synchronous allocations can be exported (both headers: "a device memory
 * allocation created with cudaMalloc/hipMalloc"); a pool allocation, a
 * pointer inside an allocation and an unknown pointer are refused with 1
 * (invalid value). The fake lets the exporting process open its own
 * handle (a second mapping of the same memory), so one process can test
 * the marshalling; what the real runtimes do then is not modelled. */
typedef struct { char magic[8]; int64_t pid, fd, size; char pad[32]; } ipc_t;
typedef struct { char *p; size_t n; } mapping_t;
static mapping_t mappings[256];
rtError_t RT(IpcGetMemHandle)(void *handle, void *p) {
  ENTER(RTS(IpcGetMemHandle));
  logf_(RTS(IpcGetMemHandle) " %p", p);
  alloc_t *a = find(p);
  if (!a || a->fd < 0 || a->owner) RETURN(1);
  ipc_t h = {{'F', 'A', 'K', 'E', 'I', 'P', 'C', 0}, getpid(), a->fd, (int64_t)a->n, {0}};
  memcpy(handle, &h, sizeof h);
  RETURN(0);
}
rtError_t RT(IpcOpenMemHandle)(void **out, ipc_t h, unsigned flags) {
  ENTER(RTS(IpcOpenMemHandle));
  logf_(RTS(IpcOpenMemHandle) " pid=%lld size=%lld flags=%u", (long long)h.pid, (long long)h.size, flags);
  if (memcmp(h.magic, "FAKEIPC", 8) != 0 || h.size <= 0) RETURN(400);
  if (flags != ipc_open_flags()) RETURN(1);
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)h.pid, (long long)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) RETURN(205); /* map failed: same code in both headers */
  char *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) RETURN(205);
  for (int i = 0; i < 256; i++)
    if (!mappings[i].p) { mappings[i] = (mapping_t){p, h.size}; *out = p; RETURN(0); }
  munmap(p, h.size);
  RETURN(2);
}
rtError_t RT(IpcCloseMemHandle)(void *p) {
  ENTER(RTS(IpcCloseMemHandle));
  logf_(RTS(IpcCloseMemHandle) " %p", p);
  for (int i = 0; i < 256; i++)
    if (p && mappings[i].p == p) { forget(); munmap(p, mappings[i].n); mappings[i].p = NULL; RETURN(0); }
  RETURN(400);
}

rtError_t RT(Free)(void *p) {
  ENTER(RTS(Free));
  logf_(RTS(Free) " %p", p);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  alloc_t *a = find(p);
  if (!a) {
    for (int i = 0; i < nhosts; i++)
      if (hosts[i].p == p && hosts[i].managed) { forget(); free(p); hosts[i].p = NULL; RETURN(0); }
  }
  if (!a || a->owner) RETURN(1);
  release(a);
  RETURN(0);
}

/* Managed memory (RT(MallocManaged), flags: the global attach flag, 1 in
 * both headers; host attach, 2, is refused here): host memory the
 * device's kernels and the copies reach at one address, in the host
 * table (so a capture's copies take it, as pinned memory) and freed with
 * RT(Free). An unsafe call, like RT(Malloc). */
rtError_t RT(MallocManaged)(void **p, size_t n, unsigned flags) {
  ENTER(RTS(MallocManaged));
  logf_(RTS(MallocManaged) " n=%zu flags=%u", n, flags);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  if (!p || !n || flags != 1) RETURN(1);
  int slot = host_slot_();
  if (slot < 0) RETURN(2);
  char *b = calloc(1, n);
  if (!b) RETURN(2);
  hosts[slot] = (host_t){b, n, 0, 1};
  *p = b;
  RETURN(0);
}
static int managed_range(const void *p, size_t n) {
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p && hosts[i].managed && (const char *)p >= hosts[i].p && (const char *)p + n <= hosts[i].p + hosts[i].n) return 1;
  return 0;
}
/* prefetch_ is the prefetch both ABIs share once the destination is read
 * (to the device: a valid ordinal; to the host: device -1): 1 (invalid
 * value) outside one managed allocation, the stream's rules otherwise.
 * Memory does not move here, so there is nothing to run: on a capturing
 * stream it is taken (as the cpu backend records it) and adds no node.
 * What a real capture does with it is not recorded (cmd/cudatruth's
 * prefetch cases); the library never makes it during one. */
static rtError_t prefetch_(const void *p, size_t n, int device, void *h) {
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) return 400;
  if (!managed_range(p, n) || device < -1 || device >= ndevices()) return 1;
  rtError_t le = legacy(s);
  if (le) return le;
  if (s && s->status == 2) return 901;
  return 0;
}

/* handleTypes: none (0) or the POSIX file descriptor (1); an exportable
 * pool's RT(MemPoolExportToShareableHandle) gives a file descriptor. */
rtError_t RT(MemPoolCreate)(void **out, const unsigned char *props) {
  ENTER(RTS(MemPoolCreate));
  int v[4];
  memcpy(v, props, sizeof v);
  int tail_zero = 1;
  for (int i = 16; i < 88; i++) if (props[i]) tail_zero = 0;
  logf_(RTS(MemPoolCreate) " allocType=%d handleTypes=%d locationType=%d locationId=%d zeroTail=%d", v[0], v[1], v[2], v[3], tail_zero);
  if (v[0] != 1 || (v[1] != 0 && v[1] != 1) || v[2] != 1 || v[3] < 0 || v[3] >= ndevices() || !tail_zero) RETURN(1);
  pool_t *p = calloc(1, sizeof *p);
  p->device = v[3];
  p->handle_types = v[1];
  p->next = created_pools; created_pools = p;
  *out = p;
  RETURN(0);
}
rtError_t RT(MemPoolExportToShareableHandle)(void *out, void *pool, int type, unsigned flags) {
  ENTER(RTS(MemPoolExportToShareableHandle));
  pool_t *p = pool;
  logf_(RTS(MemPoolExportToShareableHandle) " %p type=%d flags=%u", pool, type, flags);
  if (!p || type != 1 || flags || !(p->handle_types & 1)) RETURN(1);
  int fd = memfd_create("fakegpu-pool", MFD_CLOEXEC);
  if (fd < 0) RETURN(2);
  *(int *)out = fd;
  RETURN(0);
}
/* Pool sharing across processes. The exporter's pool gives a file
 * descriptor (RT(MemPoolExportToShareableHandle), above); the importer
 * opens a pool from it (RT(MemPoolImportFromShareableHandle): the handle
 * passed by value, an int cast to a pointer, as CUDA's programming guide
 * shows) and imports each allocation from 64 bytes of export data
 * (cudaMemPoolPtrExportData, hipMemPoolPtrExportData). The fake's export
 * data names the allocation's memfd like an IPC handle ("FAKEPTR"), and
 * the import maps it; the imported pointer is freed with RT(Free) or
 * RT(FreeAsync). */
rtError_t RT(MemPoolExportPointer)(void *data, void *p) {
  ENTER(RTS(MemPoolExportPointer));
  logf_(RTS(MemPoolExportPointer) " %p", p);
  alloc_t *a = find(p);
  if (!data || !a || !a->pool || a->fd < 0) RETURN(1);
  ipc_t h = {{'F', 'A', 'K', 'E', 'P', 'T', 'R', 0}, getpid(), a->fd, (int64_t)a->n, {0}};
  memcpy(data, &h, sizeof h);
  RETURN(0);
}
rtError_t RT(MemPoolImportFromShareableHandle)(void **out, void *handle, int type, unsigned flags) {
  ENTER(RTS(MemPoolImportFromShareableHandle));
  int fd = (int)(intptr_t)handle;
  logf_(RTS(MemPoolImportFromShareableHandle) " fd=%d type=%d flags=%u", fd, type, flags);
  if (!out || type != 1 || flags || fcntl(fd, F_GETFD) < 0) RETURN(1);
  pool_t *p = calloc(1, sizeof *p);
  p->handle_types = 1;
  p->imported = 1;
  *out = p;
  RETURN(0);
}
rtError_t RT(MemPoolImportPointer)(void **out, void *pool, void *data) {
  ENTER(RTS(MemPoolImportPointer));
  ipc_t h;
  if (!out || !pool || !data) RETURN(1);
  memcpy(&h, data, sizeof h);
  logf_(RTS(MemPoolImportPointer) " pool=%p pid=%lld size=%lld", pool, (long long)h.pid, (long long)h.size);
  if (!((pool_t *)pool)->imported || memcmp(h.magic, "FAKEPTR", 8) != 0 || h.size <= 0) RETURN(1);
  char path[64];
  snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)h.pid, (long long)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) RETURN(1);
  char *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) { close(fd); RETURN(2); }
  if (nallocs == (1 << 16)) { munmap(p, h.size); close(fd); RETURN(2); }
  allocs[nallocs++] = (alloc_t){p, h.size, NULL, 0, 1, fd, NULL, -1};
  live_bytes += h.size;
  *out = p;
  RETURN(0);
}
rtError_t RT(MemPoolDestroy)(void *p) {
  ENTER(RTS(MemPoolDestroy));
  logf_(RTS(MemPoolDestroy) " %p", p);
  if (((pool_t *)p)->is_default) RETURN(1);
  pools_cached -= ((pool_t *)p)->cached + ((pool_t *)p)->pending;
  for (pool_t **pp = &created_pools; *pp; pp = &(*pp)->next)
    if (*pp == p) { *pp = ((pool_t *)p)->next; break; }
  free(p);
  RETURN(0);
}
rtError_t RT(DeviceGetDefaultMemPool)(void **out, int dev) {
  ENTER(RTS(DeviceGetDefaultMemPool));
  logf_(RTS(DeviceGetDefaultMemPool) " device=%d", dev);
  if (dev < 0 || dev >= 16) RETURN(101);
  default_pools[dev].device = dev;
  default_pools[dev].is_default = 1;
  *out = &default_pools[dev];
  RETURN(0);
}
rtError_t RT(MemPoolSetAttribute)(void *pool, int attr, void *value) {
  ENTER(RTS(MemPoolSetAttribute));
  if (attr != 4) RETURN(1);
  ((pool_t *)pool)->threshold = *(unsigned long long *)value;
  logf_(RTS(MemPoolSetAttribute) " attr=%d threshold=%llu", attr, *(unsigned long long *)value);
  RETURN(0);
}
rtError_t RT(MemPoolTrimTo)(void *pool, size_t keep) {
  ENTER(RTS(MemPoolTrimTo));
  if (!pool) RETURN(1);
  logf_(RTS(MemPoolTrimTo) " pool=%p keep=%zu cached=%lld pending=%lld", pool, keep, ((pool_t *)pool)->cached, ((pool_t *)pool)->pending);
  pool_keep(pool, (long long)keep);
  RETURN(0);
}
rtError_t RT(MallocFromPoolAsync)(void **out, size_t n, void *pool, void *h) {
  ENTER(RTS(MallocFromPoolAsync));
  stream_t *s = stream_of(h);
  if (!s || !pool) RETURN(400);
  logf_(RTS(MallocFromPoolAsync) " n=%zu pool=%p stream=%p", n, pool, h);
  /* "Imported memory pools do not support creating new allocations." */
  if (((pool_t *)pool)->imported) RETURN(1);
  if (s->status == 2) RETURN(901);
  /* On a stream that is not capturing it is potentially unsafe (measured:
   * cmd/cudatruth pool_alloc_other, CUDA 13.0). */
  if (s->status == 0) { rtError_t u = unsafe(); if (u) RETURN(u); }
  rtError_t le = legacy(s);
  if (le) RETURN(le);
  /* An exportable pool's allocation cannot be a graph node (measured on an
   * H100, CUDA 13.0: 801, cudaErrorNotSupported). */
  if (s->status == 1 && ((pool_t *)pool)->handle_types && exportable_pool_capture_refused()) RETURN(801);
  /* A runtime without graph allocation nodes allocates at once, even in
   * a capture: the memory is nobody's graph's. */
  /* An exportable pool's allocations live in memfd mappings, so another
   * process can import them (RT(MemPoolImportPointer)). */
  RETURN(devalloc_(out, n, s->status == 1 && pool_capture_nodes() ? s->g : NULL, ((pool_t *)pool)->handle_types & 1, pool, s->device));
}
rtError_t RT(FreeAsync)(void *p, void *h) {
  ENTER(RTS(FreeAsync));
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  logf_(RTS(FreeAsync) " %p stream=%p", p, h);
  alloc_t *a = find(p);
  if (!a) RETURN(1);
  if (s->status == 2) RETURN(901);
  rtError_t le = legacy(s);
  if (le) RETURN(le);
  if (s->status == 1) {
    if (a->owner == s->g) a->graph_freed = 1;
    else record(s, (op_t){OP_FREE, p, NULL, 0, 0});
    RETURN(0);
  }
  if (a->owner && !a->owner->launched) RETURN(1);
  pool_t *pl = a->owner ? NULL : a->pool;
  long long n = (long long)a->n;
  release(a);
  if (pl && !pl->imported) { pl->pending += n; pools_cached += n; }
  RETURN(0);
}

rtError_t HOST_ALLOC(void **p, size_t n, unsigned flags) {
  ENTER(HOST_ALLOC_S);
  logf_(HOST_ALLOC_S " n=%zu flags=%u", n, flags);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  int slot = host_slot_();
  if (slot < 0) RETURN(2);
  char *b = calloc(1, n);
  if (!b) RETURN(2);
  hosts[slot] = (host_t){b, n};
  *p = b;
  RETURN(0);
}
rtError_t HOST_FREE(void *p) {
  ENTER(HOST_FREE_S);
  logf_(HOST_FREE_S " %p", p);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p == p && !hosts[i].reg && !hosts[i].managed) { forget(); free(p); hosts[i].p = NULL; RETURN(0); }
  RETURN(1);
}
/* RT(HostRegister) pins memory the caller owns; 712 when it overlaps a
 * registered range, 713 when unregistering what is not registered. */
rtError_t RT(HostRegister)(void *p, size_t n, unsigned flags) {
  ENTER(RTS(HostRegister));
  logf_(RTS(HostRegister) " %p n=%zu flags=%u", p, n, flags);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  if (!p || !n) RETURN(1);
  if (pinned(p, 1) || pinned((char *)p + n - 1, 1)) RETURN(712);
  int slot = host_slot_();
  if (slot < 0) RETURN(2);
  hosts[slot] = (host_t){p, n, 1};
  RETURN(0);
}
rtError_t RT(HostUnregister)(void *p) {
  ENTER(RTS(HostUnregister));
  logf_(RTS(HostUnregister) " %p", p);
  rtError_t e = unsafe();
  if (e) RETURN(e);
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p == p && hosts[i].reg) { forget(); hosts[i].p = NULL; RETURN(0); }
  RETURN(713);
}

/* RT(HostGetDevicePointer) is pinned or registered memory's device
 * address: its host address (unified addressing); 1 for memory that is
 * neither, or flags other than 0. */
rtError_t RT(HostGetDevicePointer)(void **d, void *h, unsigned flags) {
  ENTER(RTS(HostGetDevicePointer));
  logf_(RTS(HostGetDevicePointer) " %p flags=%u", h, flags);
  if (!d || flags || !pinned(h, 1)) RETURN(1);
  *d = h;
  RETURN(0);
}

#ifdef FAKE_HOSTFN_THREAD
#include <sys/syscall.h>
#include <unistd.h>
/* -DFAKE_HOSTFN_THREAD: a host function runs on a thread the caller's
 * language did not make, as on the real runtime's callback thread (the Go
 * side is entered from a foreign thread: purego's callback, through
 * fakecgo with CGO_ENABLED=0); fake_hostfn_tid reports that thread. */
static volatile long hostfn_tid;
long fake_hostfn_tid(void) { return hostfn_tid; }
static void *hostfn_thread(void *arg) {
  op_t *o = arg;
  hostfn_tid = (long)syscall(SYS_gettid);
  ((void (*)(void *))(void *)o->dst)((void *)o->src);
  return NULL;
}
static void run_hostfn(op_t o) {
  pthread_t t;
  if (pthread_create(&t, NULL, hostfn_thread, &o) == 0) pthread_join(t, NULL);
}
#else
static void run_hostfn(op_t o) { ((void (*)(void *))(void *)o.dst)((void *)o.src); } /* host function(userData) */
#endif

static rtError_t run_kernel(op_t o);
/* range_t: a range of memory work on device may touch (legal_range), as
 * fake_access's cache keeps them. */
typedef struct range { const char *lo, *hi; unsigned long gen; int writable, device; } range_t;
static int legal_range(int device, const char *a, const char *b, range_t *out);
/* copy_legal: every device side of a copy or memset lies inside memory
 * the op's device may touch when it runs (legal_range, as a kernel's
 * access: a live allocation, pinned or registered host memory, an IPC or
 * virtual-memory mapping), so a copy from freed memory, past an
 * allocation's end, or replayed from a graph after its memory was freed
 * fails with 700 (illegal address), as a GPU's copy faults, instead of
 * moving bytes of memory the process no longer owns. */
static int side_legal(int device, const char *p, size_t n, int write) {
  range_t r;
  /* a reservation's span may cross mappings: every byte mapped with the access */
  if (vm_res_of(p)) return vm_access_ok(p, n, write);
  return legal_range(device, p, p + n, &r) > 0 && (r.writable || !write);
}
static int copy_legal(const op_t *o) {
  if (!o->n) return 1;
  if ((o->dev_sides & DEV_DST) && !side_legal(o->device, o->dst, o->n, 1)) return 0;
  return !(o->dev_sides & DEV_SRC) || side_legal(o->device, o->src, o->n, 0);
}
/* apply runs one op, holding mu (a kernel releases it while it runs). */
static rtError_t apply(op_t o) {
  if (o.kind == OP_KERNEL) return run_kernel(o);
  if ((o.kind == OP_COPY || o.kind == OP_SET) && !copy_legal(&o)) {
    logf_("illegal address: %s dst=%p src=%p n=%zu on device %d: a device side is not memory the device may touch (freed, past an allocation's end, or never allocated)",
          o.kind == OP_COPY ? "copy" : "set", (void *)o.dst, (const void *)o.src, o.n, o.device);
    return 700;
  }
  if ((o.kind == OP_COPY || o.kind == OP_SET) && (!vm_access_ok(o.dst, o.n, 1) || (o.kind == OP_COPY && !vm_access_ok(o.src, o.n, 0)))) {
    logf_("illegal address: %s dst=%p src=%p n=%zu touches reserved memory not mapped with access", o.kind == OP_COPY ? "copy" : "set", (void *)o.dst, (const void *)o.src, o.n);
    return 700;
  }
  if (o.kind == OP_COPY) memmove(o.dst, o.src, o.n);
  else if (o.kind == OP_SET) memset(o.dst, o.val, o.n);
  else if (o.kind == OP_HOST) run_hostfn(o);
  else { alloc_t *a = find(o.dst); if (a) release(a); }
  return 0;
}
/* LaunchHostFunc(stream, fn, userData): fn runs in stream order (here at
 * once: the fake's streams are synchronous), or becomes a host node of a
 * capture that every launch runs. Left out with -DFAKE_NO_LAUNCH_HOST_FUNC
 * (Debian's libamdhip64 5.2.3 does not export hipLaunchHostFunc, although
 * its header declares it). */
#ifndef FAKE_NO_LAUNCH_HOST_FUNC
rtError_t RT(LaunchHostFunc)(void *h, void (*fn)(void *), void *user) {
  ENTER(RTS(LaunchHostFunc));
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) RETURN(400);
  if (!fn) RETURN(1);
  logf_(RTS(LaunchHostFunc) " stream=%p", h);
  rtError_t le = legacy(s);
  if (le) RETURN(le);
  op_t o = {OP_HOST, (char *)(void *)fn, (const char *)user, 0, 0};
  if (!s) RETURN(apply(o));
  if (s->status == 2) RETURN(901);
  if (s->status == 1) { record(s, o); RETURN(0); }
  RETURN(apply(o));
}
#endif
rtError_t RT(MemcpyAsync)(void *dst, const void *src, size_t n, int kind, void *h) {
  ENTER(RTS(MemcpyAsync));
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) RETURN(400);
  logf_(RTS(MemcpyAsync) " dst=%p src=%p n=%zu kind=%d stream=%p", dst, src, n, kind, h);
  if (kind < 1 || kind > 3) RETURN(21);
  int cdev = s ? s->device : cur_device;
  if (!peer_copy_ok(cdev, dst, n) || !peer_copy_ok(cdev, src, n)) RETURN(700);
  rtError_t le = legacy(s);
  if (le) RETURN(le);
  /* kinds 1-3: host to device, device to host, device to device */
  op_t o = {OP_COPY, dst, src, n, 0, .device = cdev, .dev_sides = kind == 1 ? DEV_DST : kind == 2 ? DEV_SRC : DEV_DST | DEV_SRC};
  if (!s) RETURN(apply(o));
  if (s->status == 2) RETURN(901);
  if (s->status == 1) {
    const void *host = kind == 1 ? src : kind == 2 ? dst : NULL;
    if (host && !pinned(host, n)) { s->status = 2; RETURN(900); }
    record(s, o);
    RETURN(0);
  }
  RETURN(apply(o));
}
rtError_t RT(MemsetAsync)(void *dst, int val, size_t n, void *h) {
  ENTER(RTS(MemsetAsync));
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) RETURN(400);
  logf_(RTS(MemsetAsync) " dst=%p value=%d n=%zu stream=%p", dst, val, n, h);
  if (!peer_copy_ok(s ? s->device : cur_device, dst, n)) RETURN(700);
  rtError_t le = legacy(s);
  if (le) RETURN(le);
  op_t o = {OP_SET, dst, NULL, n, val, .device = s ? s->device : cur_device, .dev_sides = DEV_DST};
  if (!s) RETURN(apply(o));
  if (s->status == 2) RETURN(901);
  if (s->status == 1) { record(s, o); RETURN(0); }
  RETURN(apply(o));
}

rtError_t RT(StreamBeginCapture)(void *h, int mode) {
  ENTER(RTS(StreamBeginCapture));
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  logf_(RTS(StreamBeginCapture) " %p mode=%d", h, mode);
  if (mode < 0 || mode > 2) RETURN(1);
  if (s->status) RETURN(401);
  s->status = 1; s->mode = mode; s->thread = pthread_self();
  s->g = calloc(1, sizeof(graph_t));
  RETURN(0);
}
/* 908 (wrong thread): a Global or ThreadLocal capture ended on another
 * thread than the one that began it; the capture stays active. */
rtError_t RT(StreamEndCapture)(void *h, void **out) {
  ENTER(RTS(StreamEndCapture));
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  logf_(RTS(StreamEndCapture) " %p", h);
  if (!s->status) RETURN(401);
  if (s->mode != 2 && !pthread_equal(s->thread, pthread_self())) RETURN(908);
  int invalid = s->status == 2;
  graph_t *g = s->g;
  s->status = 0; s->g = NULL;
  if (invalid) {
    for (int i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].owner == g) release(&allocs[i]);
    free_graph(g);
    *out = NULL;
    RETURN(901);
  }
  *out = g;
  RETURN(0);
}
rtError_t RT(GraphInstantiateWithFlags)(void **out, void *g, unsigned long long flags) {
  ENTER(RTS(GraphInstantiateWithFlags));
  logf_(RTS(GraphInstantiateWithFlags) " graph=%p flags=%llu", g, flags);
  if (!g) RETURN(1);
  if (flags & ~1ULL) RETURN(1);
  { rtError_t u = unsafe(); if (u) RETURN(u); } /* measured: cmd/cudatruth graph_instantiate */
  exec_t *e = calloc(1, sizeof *e);
  e->g = g; e->flags = flags;
  *out = e;
  RETURN(0);
}
rtError_t RT(GraphLaunch)(void *eh, void *h) {
  ENTER(RTS(GraphLaunch));
  stream_t *s = stream_of(h);
  if (!s || !eh) RETURN(400);
  exec_t *e = eh;
  logf_(RTS(GraphLaunch) " exec=%p stream=%p", eh, h);
  if (s->status == 2) RETURN(901);
  /* Not captured as a child graph: 900, capture invalidated, in every mode
   * (measured: cmd/cudatruth graph_launch_capturing, CUDA 13.0). */
  if (s->status == 1) { s->status = 2; RETURN(900); }
  rtError_t le = legacy(s);
  if (le) RETURN(le);
  for (int i = 0; i < e->g->nops; i++) {
    rtError_t r = apply(e->g->ops[i]);
    if (r) RETURN(r);
  }
  e->g->launched = 1;
  RETURN(0);
}
rtError_t RT(GraphExecDestroy)(void *e) {
  ENTER(RTS(GraphExecDestroy));
  logf_(RTS(GraphExecDestroy) " %p", e);
  { rtError_t u = unsafe(); if (u) RETURN(u); } /* measured: cmd/cudatruth graph_exec_destroy */
  free(e);
  RETURN(0);
}
rtError_t RT(GraphDestroy)(void *gh) {
  ENTER(RTS(GraphDestroy));
  graph_t *g = gh;
  logf_(RTS(GraphDestroy) " %p", gh);
  for (int i = 0; i < nallocs; i++) {
    alloc_t *a = &allocs[i];
    if (a->live && a->owner == g) {
      if (a->graph_freed || !g->launched) { graph_cached += a->n; release(a); }
      else a->owner = NULL; /* the caller frees it with the async free */
    }
  }
  free_graph(g);
  RETURN(0);
}

/* RT(ThreadExchangeStreamCaptureMode): a thread in Relaxed interaction
 * mode is never prohibited from potentially unsafe calls. */
rtError_t RT(ThreadExchangeStreamCaptureMode)(int *mode) {
  ENTER(RTS(ThreadExchangeStreamCaptureMode));
  if (*mode < 0 || *mode > 2) RETURN(1);
  int old = thread_relaxed ? 2 : 0;
  thread_relaxed = *mode == 2;
  *mode = old;
  logf_(RTS(ThreadExchangeStreamCaptureMode) " -> %d", thread_relaxed ? 2 : 0);
  RETURN(0);
}

#ifndef FAKE_NO_GRAPH_MEM_TRIM
rtError_t RT(DeviceGraphMemTrim)(int dev) {
  ENTER(RTS(DeviceGraphMemTrim));
  logf_(RTS(DeviceGraphMemTrim) " device=%d cached=%lld", dev, graph_cached);
  /* Legal during any capture (measured: cmd/cudatruth graph_mem_trim). */
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  graph_cached = 0;
  RETURN(0);
}
#endif

/* ---- device code: modules, kernels, launches ----
 * The host build of internal/kernels/collectives.cu (CAPALLOC_HOST):
 * capalloc_host_kernel finds a kernel by name (-1: none),
 * capalloc_host_param_size gives its parameter's size, and
 * capalloc_host_launch runs it on grid blocks of block threads in the
 * environment env (the C mirror of compat.h's struct ca_host_env) and
 * returns 0 when every thread is done, -1 when no thread could be made
 * (nothing ran), -2 for a configuration it cannot run, or the code of the
 * launch's first fault (a misaligned access: env->misaligned_code; memory
 * env->access refused: its code); capalloc_host_fault says which access.
 * Every access a kernel makes is checked: its natural alignment by the
 * executor, the memory by fake_access below. */
typedef struct ca_host_env {
  int device;
  void *ctx;
  int (*access)(void *ctx, int device, const void *p, unsigned long n, int write);
  unsigned sms, blocks_per_sm;
  int misaligned_code;
} ca_host_env;
extern int capalloc_host_kernel(const char *name);
extern unsigned long capalloc_host_param_size(int k);
extern int capalloc_host_launch(int k, unsigned grid, unsigned block, const void *params, const ca_host_env *env);
extern const char *capalloc_host_fault(void);

/* What the fronts report as the device's limits: small by default, so a
 * launch stays cheap on a 2-core machine (every block is a thread). */
static int max_threads(void) { return envint(ENVN("MAX_THREADS"), 64); }
static int multiprocessors(void) { return envint(ENVN("SMS"), 4); }

/* A module: a copy of its image (NUL-terminated text: PTX, or the fake
 * hiprtc's code object), the context (cuda) and device it was loaded on. */
typedef struct module { char *image; void *ctx; int device; struct module *next; } module_t;
/* A function: kernel k of the host build, found in module m. */
typedef struct function { module_t *m; int k; char name[128]; struct function *next; } function_t;
static module_t *modules;
static function_t *functions;

static module_t *module_of(void *h) {
  for (module_t *m = modules; m; m = m->next) if (m == h) return m;
  return NULL;
}
static function_t *function_of(void *h) {
  for (function_t *f = functions; f; f = f->next) if (f == h) return f;
  return NULL;
}
static rtError_t module_load_(void **out, const char *image, void *ctx, int device) {
  module_t *m = calloc(1, sizeof *m);
  if (!m || !(m->image = strdup(image))) { free(m); return 2; }
  m->ctx = ctx; m->device = device;
  m->next = modules; modules = m;
  *out = m;
  return 0;
}
/* function_get_ looks name up in module mh: has(image, name) says whether
 * the image defines it (500, not found, otherwise). */
static rtError_t function_get_(void **out, void *mh, const char *name, int (*has)(const char *image, const char *name)) {
  module_t *m = module_of(mh);
  if (!out || !name) return 1;
  if (!m) return 400;
  int k = capalloc_host_kernel(name);
  if (!has(m->image, name) || k < 0 || strlen(name) >= sizeof ((function_t *)0)->name) return 500;
  function_t *f = calloc(1, sizeof *f);
  if (!f) return 2;
  f->m = m; f->k = k;
  strcpy(f->name, name);
  f->next = functions; functions = f;
  *out = f;
  return 0;
}
/* module_unload_ frees a module and forgets its functions (a later launch
 * of one is 400, invalid handle). */
static rtError_t module_unload_(void *mh) {
  module_t **pm = &modules;
  while (*pm && *pm != mh) pm = &(*pm)->next;
  if (!*pm) return 400;
  module_t *m = *pm;
  *pm = m->next;
  for (function_t **pf = &functions; *pf;) {
    if ((*pf)->m == m) { function_t *f = *pf; *pf = f->next; free(f); }
    else pf = &(*pf)->next;
  }
  free(m->image); free(m);
  return 0;
}
/* has_text reports whether image contains before name after. */
static int has_text(const char *image, const char *before, const char *name, const char *after) {
  char pat[256];
  if (snprintf(pat, sizeof pat, "%s%s%s", before, name, after) >= (int)sizeof pat) return 0;
  return strstr(image, pat) != NULL;
}

/* fake_blocks_per_sm is how many blocks of kernel k fit on one
 * multiprocessor at block threads: FAKE_<RT>_BLOCKS_PER_SM, either "N" for
 * every kernel or "name=N,...,*=N" (* for the others), else
 * FAKE_<RT>_THREADS_PER_SM (default 2048) / block. The executor admits
 * blocks by it (ca_host_env), and the fake occupancy API answers with it. */
static unsigned fake_blocks_per_sm(int k, unsigned block) {
  const char *v = getenv(ENVN("BLOCKS_PER_SM"));
  if (v && *v) {
    if (!strchr(v, '=')) return (unsigned)atol(v);
    long def = -1;
    while (*v) {
      const char *eq = strchr(v, '='), *end = strchr(v, ',');
      if (!end) end = v + strlen(v);
      if (eq && eq < end) {
        char name[128];
        size_t l = (size_t)(eq - v);
        if (l < sizeof name) {
          memcpy(name, v, l);
          name[l] = 0;
          if (strcmp(name, "*") == 0) def = atol(eq + 1);
          else if (capalloc_host_kernel(name) == k) return (unsigned)atol(eq + 1);
        }
      }
      v = *end ? end + 1 : end;
    }
    if (def >= 0) return (unsigned)def;
  }
  long long t = envll(ENVN("THREADS_PER_SM"), 2048);
  return block && t > 0 ? (unsigned)(t / block) : 0;
}

/* fake_access: a kernel's access of [p, p+n) is legal (0) when it lies
 * inside one live device allocation (of the launch's device, or of a
 * device it enabled peer access to: fake_peer_ok), a pinned or
 * registered host range, a mapped virtual-memory range with the access
 * (read, or read-write for a store), or an IPC-opened mapping; else it is
 * 700, illegal address, as a GPU's memory fault. It runs on every access:
 * a per-thread cache of the ranges last found answers while access_gen
 * stands still; a miss searches the tables under mu. */
#define ACCESS_CACHE 16
static __thread range_t access_cache[ACCESS_CACHE];
static __thread unsigned access_next;
/* legal_range finds the range holding [a, b) that work on device may
 * touch, under mu: 1 found, 0 none, -1 another device's memory without
 * peer access from device (fake_peer_ok). */
static int legal_range(int device, const char *a, const char *b, range_t *out) {
  out->writable = 1;
  out->device = device;
  const alloc_t *al = alloc_at(a); /* allocations do not overlap: the one holding a */
  if (al && b <= al->p + al->n) {
    if (!fake_peer_ok(device, al)) return -1;
    out->lo = al->p; out->hi = al->p + al->n;
    return 1;
  }
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p && a >= hosts[i].p && b <= hosts[i].p + hosts[i].n) { out->lo = hosts[i].p; out->hi = hosts[i].p + hosts[i].n; return 1; }
  for (int i = 0; i < 256; i++)
    if (mappings[i].p && a >= mappings[i].p && b <= mappings[i].p + mappings[i].n) { out->lo = mappings[i].p; out->hi = mappings[i].p + mappings[i].n; return 1; }
  vmres_t *r = vm_res_of(a);
  /* A device with pageable memory access (FAKE_<RT>_PAGEABLE_ACCESS=1,
   * the device attribute's answer) reads any host memory that is not
   * device memory: in place through the host's page tables (ATS: GB10,
   * Grace Hopper) or through HMM's mirror of them, which the fake does not
   * tell apart. Elsewhere host memory must be pinned, registered or
   * managed (above). */
  if (!al && !r && envint(ENVN("PAGEABLE_ACCESS"), 0)) { out->lo = a; out->hi = b; return 1; }
  if (r && b <= r->base + r->n) {
    size_t at = (size_t)(a - r->base), end = (size_t)(b - r->base);
    for (vmmap_t *m = r->maps; m; m = m->next)
      if (m->off <= at && end <= m->off + m->n && m->access) {
        out->lo = r->base + m->off; out->hi = out->lo + m->n; out->writable = m->access == 3;
        return 1;
      }
  }
  return 0;
}
static int fake_access(void *ctx, int device, const void *p, unsigned long n, int write) {
  (void)ctx;
  const char *a = p, *b = a + n;
  unsigned long gen = __atomic_load_n(&access_gen, __ATOMIC_ACQUIRE);
  for (int i = 0; i < ACCESS_CACHE; i++) {
    range_t *c = &access_cache[i];
    if (c->gen == gen && c->device == device && a >= c->lo && b <= c->hi && (c->writable || !write)) return 0;
  }
  range_t r;
  pthread_mutex_lock(&mu);
  int found = legal_range(device, a, b, &r);
  r.gen = access_gen;
  if (found < 0) logf_("illegal address: a kernel on device %d touches %p of another device without peer access", device, p);
  pthread_mutex_unlock(&mu);
  if (found <= 0 || (write && !r.writable)) return 700;
  access_cache[access_next++ % ACCESS_CACHE] = r;
  return 0;
}

/* run_kernel runs a kernel op in the calling thread without mu, which the
 * caller holds (and holds again when it returns). A fault is the launch's
 * error, logged with the access that made it, and loses the device. */
static rtError_t run_kernel(op_t o) {
  ca_host_env env = {o.device, NULL, fake_access, (unsigned)multiprocessors(), fake_blocks_per_sm(o.k, o.block), misaligned_code()};
  pthread_mutex_unlock(&mu);
  int r = capalloc_host_launch(o.k, o.grid, o.block, o.dst, &env);
  pthread_mutex_lock(&mu);
  if (r > 0) {
    logf_("kernel fault: code %d: %s", r, capalloc_host_fault());
    if (o.device >= 0 && o.device < LOST_DEVICES) lost[o.device] = r; /* sticky */
    return r;
  }
  return r == 0 ? 0 : r == -1 ? 701 : 1;
}

/* launch_ is the module launch both headers declare with one shape (f,
 * grid x/y/z, block x/y/z, dynamic shared bytes, stream, void
 * **kernelParams, void **extra), once the front has checked its own rules;
 * called with mu held, as ENTER leaves it. The kernels are 1-D, declare
 * their block-shared memory statically and take one parameter through
 * kernelParams: anything else is 1 (invalid value). */
static rtError_t launch_(const char *fn, function_t *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, unsigned shared, void *h, void **params, void **extra) {
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) return 400;
  logf_("%s kernel=%s grid=%u,%u,%u block=%u,%u,%u shared=%u stream=%p", fn, f->name, gx, gy, gz, bx, by, bz, shared, h);
  if (!gx || gy != 1 || gz != 1 || !bx || by != 1 || bz != 1 || bx > (unsigned)max_threads() || shared || extra) return 1;
  if (!params || !params[0]) return 1;
  rtError_t le = legacy(s);
  if (le) return le;
  if (s && s->status == 2) return 901;
  size_t n = capalloc_host_param_size(f->k);
  char *copy = malloc(n ? n : 1);
  if (!copy) return 2;
  memcpy(copy, params[0], n);
  op_t o = {OP_KERNEL, copy, NULL, n, 0, f->k, gx, bx, s ? s->device : cur_device};
  if (s && s->status == 1) { record(s, o); return 0; }
  rtError_t e = run_kernel(o);
  free(copy);
  return e;
}

/* ---- topology: occupancy, PCI bus ids, peer access ---- */

/* occupancy_: the occupancy call both headers declare with one shape
 * (int *numBlocks, function, int blockSize, size_t dynamic shared bytes),
 * called with mu held. A block over the device's limit fits 0 times. */
static rtError_t occupancy_(const char *fn, int *n, void *fh, int block, size_t shared) {
  function_t *f = function_of(fh);
  if (!f) return 400;
  if (!n || block <= 0) return 1;
  *n = block > max_threads() ? 0 : (int)fake_blocks_per_sm(f->k, (unsigned)block);
  logf_("%s kernel=%s block=%d shared=%zu -> %d", fn, f->name, block, shared, *n);
  return 0;
}

/* RT(DeviceGetPCIBusId)(char *id, int len, int device): "0000:NN:00.0",
 * NN = 0x10 + device, the same in every process. */
rtError_t RT(DeviceGetPCIBusId)(char *id, int len, int dev) {
  ENTER(RTS(DeviceGetPCIBusId));
  if (dev < 0 || dev >= ndevices()) RETURN(101);
  if (!id || len < 13) RETURN(1);
  snprintf(id, len, "0000:%02x:00.0", 0x10 + dev);
  RETURN(0);
}
/* RT(DeviceCanAccessPeer)(int *can, int device, int peer): 1 for two
 * distinct devices not listed in FAKE_<RT>_NO_P2P, 0 for a device and
 * itself (as CUDA answers). */
rtError_t RT(DeviceCanAccessPeer)(int *can, int dev, int peer) {
  ENTER(RTS(DeviceCanAccessPeer));
  logf_(RTS(DeviceCanAccessPeer) " device=%d peer=%d", dev, peer);
  if (dev < 0 || dev >= ndevices() || peer < 0 || peer >= ndevices() || dev >= 16 || peer >= 16) RETURN(101);
  if (!can) RETURN(1);
  *can = dev != peer && !no_p2p(dev, peer);
  RETURN(0);
}
/* RT(DeviceEnablePeerAccess)(int peer, unsigned flags), from the current
 * device: 704 when already enabled, 217 where the pair cannot, 101 for
 * an invalid or the current device, 1 for flags other than 0. */
rtError_t RT(DeviceEnablePeerAccess)(int peer, unsigned flags) {
  ENTER(RTS(DeviceEnablePeerAccess));
  logf_(RTS(DeviceEnablePeerAccess) " peer=%d flags=%u", peer, flags);
  if (flags) RETURN(1);
  if (peer < 0 || peer >= ndevices() || peer >= 16 || peer == cur_device) RETURN(101);
  if (no_p2p(cur_device, peer)) RETURN(217);
  if (peer_on[cur_device][peer]) RETURN(704);
  peer_on[cur_device][peer] = 1;
  RETURN(0);
}
