/* A fake libcudart for tests on machines without a GPU. It exports the
 * runtime functions the cuda package binds, with simple semantics: device
 * memory is host memory, streams execute at once, captures record into a
 * graph that replays on launch, and CUDA's capture rules (unsafe calls,
 * same-thread end, pinned copies) are enforced. Every call is logged with
 * its arguments and the calling thread's current device, so tests check the
 * marshalling (argument order, memcpy kinds, flags) through purego.
 *
 * Environment: FAKE_CUDART_VERSION, FAKE_CUDA_DRIVER_VERSION (default
 * 12040; 0: no driver), FAKE_CUDA_DEVICES (default 1; 0: no device),
 * FAKE_CUDA_NO_POOLS, FAKE_CUDA_INTEGRATED, FAKE_CUDA_MEM (bytes, default 1 GiB),
 * FAKE_CUDA_FAIL=name:code (that function returns code; with
 * FAKE_CUDA_FAIL_INVALIDATES set it also invalidates every active capture).
 *
 * Compile with -DFAKE_NO_GRAPH_MEM_TRIM to leave cudaDeviceGraphMemTrim out
 * (an optional symbol for the binding); -DFAKE_NO_DRIVER and
 * -DFAKE_RUNTIME_VERSION=N: see the versions below; -DFAKE_HOSTFN_THREAD
 * runs every host function on a thread of its own, as CUDA does, and
 * joins it (fake_hostfn_tid reports that thread's id). */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cudaError_t;
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
enum { OP_COPY, OP_SET, OP_FREE, OP_HOST };
typedef struct { int kind; char *dst; const char *src; size_t n; int val; } op_t;
typedef struct graph { op_t *ops; int nops, cap; int launched; } graph_t;
typedef struct { graph_t *g; unsigned long long flags; } exec_t;
typedef struct stream {
  int device; unsigned flags; int priority;
  int status; /* 0 none, 1 active, 2 invalidated */
  int mode; pthread_t thread; graph_t *g;
  struct stream *next;
} stream_t;
static stream_t *streams;
static int injected(const char *fn) {
  const char *v = getenv("FAKE_CUDA_FAIL");
  size_t l = strlen(fn);
  if (v && strncmp(v, fn, l) == 0 && v[l] == ':') {
    int code = atoi(v + l + 1);
    if (getenv("FAKE_CUDA_FAIL_INVALIDATES"))
      for (struct stream *s = streams; s; s = s->next) if (s->status == 1) s->status = 2;
    return code;
  }
  return 0;
}
static __thread int thread_strict_captures; /* Global/ThreadLocal begun here */

static void record(stream_t *s, op_t o) {
  graph_t *g = s->g;
  if (g->nops == g->cap) { g->cap = g->cap ? 2 * g->cap : 16; g->ops = realloc(g->ops, g->cap * sizeof(op_t)); }
  g->ops[g->nops++] = o;
}

/* ---- allocations ---- */
typedef struct { char *p; size_t n; graph_t *owner; int graph_freed; int live; } alloc_t;
static alloc_t allocs[1 << 16];
static int nallocs;
static long long live_bytes;
/* graph_cached: memory graph allocations released at cudaGraphDestroy,
 * kept for later graphs (reused by graph allocations) and counted against
 * the device until cudaDeviceGraphMemTrim, as CUDA's graph memory is. */
static long long graph_cached;
static alloc_t *find(const void *p) {
  for (int i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].p == p) return &allocs[i];
  return NULL;
}
static void release(alloc_t *a) { free(a->p); a->live = 0; live_bytes -= a->n; }
static cudaError_t devalloc(void **out, size_t n, graph_t *owner) {
  long long reuse = owner ? (graph_cached < (long long)n ? graph_cached : (long long)n) : 0;
  if (live_bytes + graph_cached - reuse + (long long)n > envll("FAKE_CUDA_MEM", 1LL << 30) || nallocs == (1 << 16)) return 2;
  graph_cached -= reuse;
  char *p = aligned_alloc(256, (n + 255) / 256 * 256);
  if (!p) return 2;
  memset(p, 0xAB, n);
  allocs[nallocs++] = (alloc_t){p, n, owner, 0, 1};
  live_bytes += n;
  *out = p;
  return 0;
}

typedef struct { char *p; size_t n; int reg; } host_t; /* reg: cudaHostRegister'd, not ours */
static host_t hosts[4096];
static int nhosts;
static int pinned(const void *p, size_t n) {
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p && (const char *)p >= hosts[i].p && (const char *)p + n <= hosts[i].p + hosts[i].n) return 1;
  return 0;
}

/* unsafe applies CUDA's rule for potentially unsafe calls: refused (900)
 * on a thread with a Global/ThreadLocal capture of its own, or while any
 * Global capture runs; the capture concerned is invalidated. */
static __thread int thread_relaxed; /* cudaThreadExchangeStreamCaptureMode(Relaxed) on this thread */
static cudaError_t unsafe(void) {
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
/* The legacy default stream: handle 0 or cudaStreamLegacy ((cudaStream_t)0x1). */
static int is_legacy(void *h) { return h == NULL || h == (void *)1; }

/* legacy applies the legacy-stream rule, as measured on an H100 (driver
 * 580, runtime 13.0, cmd/cudatruth copy_pageable_sync): a stream created
 * without cudaStreamNonBlocking synchronizes implicitly with the legacy
 * stream. While such a stream captures, in any mode, work on the legacy
 * stream would depend on the capture: it is refused with 906
 * (cudaErrorStreamCaptureImplicit) and the capture is invalidated. Work on
 * another stream, blocking or not, is not affected (memset_other: 0), and
 * a non-blocking stream's capture is outside the rule. s is NULL for the
 * legacy stream. */
static cudaError_t legacy(stream_t *s) {
  if (s) return 0;
  int refused = 0;
  for (stream_t *t = streams; t; t = t->next)
    if (t->status == 1 && !(t->flags & 1)) { t->status = 2; refused = 1; }
  return refused ? 906 : 0;
}

#define ENTER(name) pthread_mutex_lock(&mu); cudaError_t inj_ = injected(name); if (inj_) { logf_("%s injected=%d", name, inj_); pthread_mutex_unlock(&mu); return inj_; }
#define RETURN(e) do { cudaError_t r_ = (e); pthread_mutex_unlock(&mu); return r_; } while (0)

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

cudaError_t cudaStreamCreateWithPriority(void **out, unsigned flags, int prio) {
  ENTER("cudaStreamCreateWithPriority");
  stream_t *s = calloc(1, sizeof *s);
  s->device = cur_device; s->flags = flags; s->priority = prio;
  s->next = streams; streams = s;
  *out = s;
  logf_("cudaStreamCreateWithPriority flags=%u priority=%d -> %p", flags, prio, (void *)s);
  RETURN(0);
}
cudaError_t cudaStreamDestroy(void *h) {
  ENTER("cudaStreamDestroy");
  stream_t **pp = &streams;
  while (*pp && *pp != h) pp = &(*pp)->next;
  if (!*pp) RETURN(400);
  *pp = ((stream_t *)h)->next;
  logf_("cudaStreamDestroy %p", h);
  free(h);
  RETURN(0);
}
static cudaError_t sync_like(const char *fn, void *h) {
  if (is_legacy(h)) { cudaError_t e = legacy(NULL); return e ? e : unsafe(); }
  stream_t *s = stream_of(h);
  if (!s) return 400;
  if (s->status) { s->status = 2; return 900; }
  cudaError_t e = legacy(s);
  return e ? e : unsafe();
}
cudaError_t cudaStreamSynchronize(void *h) { ENTER("cudaStreamSynchronize"); logf_("cudaStreamSynchronize %p", h); RETURN(sync_like("sync", h)); }
cudaError_t cudaStreamQuery(void *h) { ENTER("cudaStreamQuery"); logf_("cudaStreamQuery %p", h); RETURN(sync_like("query", h)); }
cudaError_t cudaStreamIsCapturing(void *h, int *st) {
  ENTER("cudaStreamIsCapturing");
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  *st = s->status;
  RETURN(0);
}

cudaError_t cudaMalloc(void **p, size_t n) {
  ENTER("cudaMalloc");
  logf_("cudaMalloc n=%zu", n);
  cudaError_t e = unsafe();
  if (e) RETURN(e);
  RETURN(devalloc(p, n, NULL));
}
cudaError_t cudaFree(void *p) {
  ENTER("cudaFree");
  logf_("cudaFree %p", p);
  cudaError_t e = unsafe();
  if (e) RETURN(e);
  alloc_t *a = find(p);
  if (!a || a->owner) RETURN(1);
  release(a);
  RETURN(0);
}

typedef struct { int device; int is_default; unsigned long long threshold; } pool_t;
static pool_t default_pools[16];
cudaError_t cudaMemPoolCreate(void **out, const unsigned char *props) {
  ENTER("cudaMemPoolCreate");
  int v[4];
  memcpy(v, props, sizeof v);
  int tail_zero = 1;
  for (int i = 16; i < 88; i++) if (props[i]) tail_zero = 0;
  logf_("cudaMemPoolCreate allocType=%d handleTypes=%d locationType=%d locationId=%d zeroTail=%d", v[0], v[1], v[2], v[3], tail_zero);
  if (v[0] != 1 || v[1] != 0 || v[2] != 1 || v[3] < 0 || v[3] >= envint("FAKE_CUDA_DEVICES", 1) || !tail_zero) RETURN(1);
  pool_t *p = calloc(1, sizeof *p);
  p->device = v[3];
  *out = p;
  RETURN(0);
}
cudaError_t cudaMemPoolDestroy(void *p) {
  ENTER("cudaMemPoolDestroy");
  logf_("cudaMemPoolDestroy %p", p);
  if (((pool_t *)p)->is_default) RETURN(1);
  free(p);
  RETURN(0);
}
cudaError_t cudaDeviceGetDefaultMemPool(void **out, int dev) {
  ENTER("cudaDeviceGetDefaultMemPool");
  logf_("cudaDeviceGetDefaultMemPool device=%d", dev);
  if (dev < 0 || dev >= 16) RETURN(101);
  default_pools[dev].device = dev;
  default_pools[dev].is_default = 1;
  *out = &default_pools[dev];
  RETURN(0);
}
cudaError_t cudaMemPoolSetAttribute(void *pool, int attr, void *value) {
  ENTER("cudaMemPoolSetAttribute");
  if (attr != 4) RETURN(1);
  ((pool_t *)pool)->threshold = *(unsigned long long *)value;
  logf_("cudaMemPoolSetAttribute attr=%d threshold=%llu", attr, *(unsigned long long *)value);
  RETURN(0);
}
cudaError_t cudaMemPoolTrimTo(void *pool, size_t keep) {
  ENTER("cudaMemPoolTrimTo");
  if (!pool) RETURN(1);
  logf_("cudaMemPoolTrimTo pool=%p keep=%zu", pool, keep);
  RETURN(0);
}
cudaError_t cudaMallocFromPoolAsync(void **out, size_t n, void *pool, void *h) {
  ENTER("cudaMallocFromPoolAsync");
  stream_t *s = stream_of(h);
  if (!s || !pool) RETURN(400);
  logf_("cudaMallocFromPoolAsync n=%zu pool=%p stream=%p", n, pool, h);
  if (s->status == 2) RETURN(901);
  /* On a stream that is not capturing it is potentially unsafe (measured:
   * cmd/cudatruth pool_alloc_other, CUDA 13.0). */
  if (s->status == 0) { cudaError_t u = unsafe(); if (u) RETURN(u); }
  cudaError_t le = legacy(s);
  if (le) RETURN(le);
  RETURN(devalloc(out, n, s->status == 1 ? s->g : NULL));
}
cudaError_t cudaFreeAsync(void *p, void *h) {
  ENTER("cudaFreeAsync");
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  logf_("cudaFreeAsync %p stream=%p", p, h);
  alloc_t *a = find(p);
  if (!a) RETURN(1);
  if (s->status == 2) RETURN(901);
  cudaError_t le = legacy(s);
  if (le) RETURN(le);
  if (s->status == 1) {
    if (a->owner == s->g) a->graph_freed = 1;
    else record(s, (op_t){OP_FREE, p, NULL, 0, 0});
    RETURN(0);
  }
  if (a->owner && !a->owner->launched) RETURN(1);
  release(a);
  RETURN(0);
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned flags) {
  ENTER("cudaHostAlloc");
  logf_("cudaHostAlloc n=%zu flags=%u", n, flags);
  cudaError_t e = unsafe();
  if (e) RETURN(e);
  if (nhosts == 4096) RETURN(2);
  char *b = calloc(1, n);
  if (!b) RETURN(2);
  hosts[nhosts++] = (host_t){b, n};
  *p = b;
  RETURN(0);
}
cudaError_t cudaFreeHost(void *p) {
  ENTER("cudaFreeHost");
  logf_("cudaFreeHost %p", p);
  cudaError_t e = unsafe();
  if (e) RETURN(e);
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p == p && !hosts[i].reg) { free(p); hosts[i].p = NULL; RETURN(0); }
  RETURN(1);
}
/* cudaHostRegister pins memory the caller owns; 712 when it overlaps a
 * registered range, 713 when unregistering what is not registered
 * (driver_types.h: cudaErrorHostMemoryAlreadyRegistered, ...NotRegistered). */
cudaError_t cudaHostRegister(void *p, size_t n, unsigned flags) {
  ENTER("cudaHostRegister");
  logf_("cudaHostRegister %p n=%zu flags=%u", p, n, flags);
  cudaError_t e = unsafe();
  if (e) RETURN(e);
  if (!p || !n) RETURN(1);
  if (pinned(p, 1) || pinned((char *)p + n - 1, 1)) RETURN(712);
  if (nhosts == 4096) RETURN(2);
  hosts[nhosts++] = (host_t){p, n, 1};
  RETURN(0);
}
cudaError_t cudaHostUnregister(void *p) {
  ENTER("cudaHostUnregister");
  logf_("cudaHostUnregister %p", p);
  cudaError_t e = unsafe();
  if (e) RETURN(e);
  for (int i = 0; i < nhosts; i++)
    if (hosts[i].p == p && hosts[i].reg) { hosts[i].p = NULL; RETURN(0); }
  RETURN(713);
}

#ifdef FAKE_HOSTFN_THREAD
#include <sys/syscall.h>
#include <unistd.h>
/* A host function runs on a thread the caller's language did not make, as
 * on CUDA's own callback thread: the Go side is entered from a foreign
 * thread (purego's callback, through fakecgo with CGO_ENABLED=0). */
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
static void run_hostfn(op_t o) { ((void (*)(void *))(void *)o.dst)((void *)o.src); } /* cudaHostFn_t(userData) */
#endif

static cudaError_t apply(op_t o) {
  if (o.kind == OP_COPY) memmove(o.dst, o.src, o.n);
  else if (o.kind == OP_SET) memset(o.dst, o.val, o.n);
  else if (o.kind == OP_HOST) run_hostfn(o);
  else { alloc_t *a = find(o.dst); if (a) release(a); }
  return 0;
}
/* cudaLaunchHostFunc(cudaStream_t, cudaHostFn_t fn, void *userData): fn
 * runs in stream order (here at once: the fake's streams are synchronous),
 * or becomes a host node of a capture that every launch runs. */
cudaError_t cudaLaunchHostFunc(void *h, void (*fn)(void *), void *user) {
  ENTER("cudaLaunchHostFunc");
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) RETURN(400);
  if (!fn) RETURN(1);
  logf_("cudaLaunchHostFunc stream=%p", h);
  cudaError_t le = legacy(s);
  if (le) RETURN(le);
  op_t o = {OP_HOST, (char *)(void *)fn, (const char *)user, 0, 0};
  if (!s) RETURN(apply(o));
  if (s->status == 2) RETURN(901);
  if (s->status == 1) { record(s, o); RETURN(0); }
  RETURN(apply(o));
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *h) {
  ENTER("cudaMemcpyAsync");
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) RETURN(400);
  logf_("cudaMemcpyAsync dst=%p src=%p n=%zu kind=%d stream=%p", dst, src, n, kind, h);
  if (kind < 1 || kind > 3) RETURN(21);
  cudaError_t le = legacy(s);
  if (le) RETURN(le);
  if (!s) RETURN(apply((op_t){OP_COPY, dst, src, n, 0}));
  if (s->status == 2) RETURN(901);
  if (s->status == 1) {
    const void *host = kind == 1 ? src : kind == 2 ? dst : NULL;
    if (host && !pinned(host, n)) { s->status = 2; RETURN(900); }
    record(s, (op_t){OP_COPY, dst, src, n, 0});
    RETURN(0);
  }
  RETURN(apply((op_t){OP_COPY, dst, src, n, 0}));
}
cudaError_t cudaMemsetAsync(void *dst, int val, size_t n, void *h) {
  ENTER("cudaMemsetAsync");
  stream_t *s = stream_of(h);
  if (!s && !is_legacy(h)) RETURN(400);
  logf_("cudaMemsetAsync dst=%p value=%d n=%zu stream=%p", dst, val, n, h);
  cudaError_t le = legacy(s);
  if (le) RETURN(le);
  if (!s) RETURN(apply((op_t){OP_SET, dst, NULL, n, val}));
  if (s->status == 2) RETURN(901);
  if (s->status == 1) { record(s, (op_t){OP_SET, dst, NULL, n, val}); RETURN(0); }
  RETURN(apply((op_t){OP_SET, dst, NULL, n, val}));
}

cudaError_t cudaStreamBeginCapture(void *h, int mode) {
  ENTER("cudaStreamBeginCapture");
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  logf_("cudaStreamBeginCapture %p mode=%d", h, mode);
  if (mode < 0 || mode > 2) RETURN(1);
  if (s->status) RETURN(401);
  s->status = 1; s->mode = mode; s->thread = pthread_self();
  s->g = calloc(1, sizeof(graph_t));
  if (mode != 2) thread_strict_captures++;
  RETURN(0);
}
cudaError_t cudaStreamEndCapture(void *h, void **out) {
  ENTER("cudaStreamEndCapture");
  stream_t *s = stream_of(h);
  if (!s) RETURN(400);
  logf_("cudaStreamEndCapture %p", h);
  if (!s->status) RETURN(401);
  if (s->mode != 2 && !pthread_equal(s->thread, pthread_self())) RETURN(908);
  if (s->mode != 2) thread_strict_captures--;
  int invalid = s->status == 2;
  graph_t *g = s->g;
  s->status = 0; s->g = NULL;
  if (invalid) {
    for (int i = 0; i < nallocs; i++) if (allocs[i].live && allocs[i].owner == g) release(&allocs[i]);
    free(g->ops); free(g);
    *out = NULL;
    RETURN(901);
  }
  *out = g;
  RETURN(0);
}
cudaError_t cudaGraphInstantiateWithFlags(void **out, void *g, unsigned long long flags) {
  ENTER("cudaGraphInstantiateWithFlags");
  logf_("cudaGraphInstantiateWithFlags graph=%p flags=%llu", g, flags);
  if (!g) RETURN(1);
  { cudaError_t u = unsafe(); if (u) RETURN(u); } /* measured: cmd/cudatruth graph_instantiate */
  exec_t *e = calloc(1, sizeof *e);
  e->g = g; e->flags = flags;
  *out = e;
  RETURN(0);
}
cudaError_t cudaGraphLaunch(void *eh, void *h) {
  ENTER("cudaGraphLaunch");
  stream_t *s = stream_of(h);
  if (!s || !eh) RETURN(400);
  exec_t *e = eh;
  logf_("cudaGraphLaunch exec=%p stream=%p", eh, h);
  if (s->status == 2) RETURN(901);
  /* Not captured as a child graph: 900, capture invalidated, in every mode
   * (measured: cmd/cudatruth graph_launch_capturing, CUDA 13.0). */
  if (s->status == 1) { s->status = 2; RETURN(900); }
  cudaError_t le = legacy(s);
  if (le) RETURN(le);
  for (int i = 0; i < e->g->nops; i++) apply(e->g->ops[i]);
  e->g->launched = 1;
  RETURN(0);
}
cudaError_t cudaGraphExecDestroy(void *e) {
  ENTER("cudaGraphExecDestroy");
  logf_("cudaGraphExecDestroy %p", e);
  { cudaError_t u = unsafe(); if (u) RETURN(u); } /* measured: cmd/cudatruth graph_exec_destroy */
  free(e);
  RETURN(0);
}
cudaError_t cudaGraphDestroy(void *gh) {
  ENTER("cudaGraphDestroy");
  graph_t *g = gh;
  logf_("cudaGraphDestroy %p", gh);
  for (int i = 0; i < nallocs; i++) {
    alloc_t *a = &allocs[i];
    if (a->live && a->owner == g) {
      if (a->graph_freed || !g->launched) { graph_cached += a->n; release(a); }
      else a->owner = NULL; /* the caller frees it with cudaFreeAsync */
    }
  }
  free(g->ops); free(g);
  RETURN(0);
}

/* cudaThreadExchangeStreamCaptureMode: a thread in Relaxed interaction mode
 * is never prohibited from potentially unsafe calls. */
cudaError_t cudaThreadExchangeStreamCaptureMode(int *mode) {
  ENTER("cudaThreadExchangeStreamCaptureMode");
  if (*mode < 0 || *mode > 2) RETURN(1);
  int old = thread_relaxed ? 2 : 0;
  thread_relaxed = *mode == 2;
  *mode = old;
  logf_("cudaThreadExchangeStreamCaptureMode -> %d", thread_relaxed ? 2 : 0);
  RETURN(0);
}

#ifndef FAKE_NO_GRAPH_MEM_TRIM
cudaError_t cudaDeviceGraphMemTrim(int dev) {
  ENTER("cudaDeviceGraphMemTrim");
  logf_("cudaDeviceGraphMemTrim device=%d cached=%lld", dev, graph_cached);
  /* Legal during any capture (measured: cmd/cudatruth graph_mem_trim). */
  if (dev < 0 || dev >= envint("FAKE_CUDA_DEVICES", 1)) RETURN(101);
  graph_cached = 0;
  RETURN(0);
}
#endif
