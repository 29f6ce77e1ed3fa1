/* compat.h: the few primitives the kernels use, for the three compilers
 * that build collectives.cu:
 *   NVRTC (CUDA, __CUDACC_RTC__): PTX for compute_70 and later;
 *   hiprtc (HIP, __HIPCC_RTC__): a code object for the device's gfx arch;
 *   g++ (the fake runtimes, CAPALLOC_HOST): host code in which every block
 *   of a launch runs at once and its threads as fibers (the host section
 *   below; capalloc_host_launch in collectives.cu), so cross-rank spin
 *   waits, __syncthreads and the timeouts behave as on a GPU and the
 *   kernels' logic is tested without one.
 * Only what the kernels need is here: thread and block indices, the block
 * barrier, one block-shared array, global-memory loads and stores (plain,
 * volatile, system-scope release/acquire, 32- and 64-bit), a compare-and-swap, a release add, a global
 * timer and a pause in spin loops. The kernels touch global memory only
 * through these, so the host build checks every access as a GPU would. */
#ifndef CAPALLOC_COMPAT_H
#define CAPALLOC_COMPAT_H

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
/* Sixteen bytes moved by one vector access (ld/st .v4.u32 on CUDA), which
 * must be 16-byte aligned. */
struct alignas(16) ca_v4 {
  u32 x, y, z, w;
};

#if defined(__CUDACC_RTC__) || defined(__CUDACC__) || defined(__HIPCC_RTC__) || defined(__HIPCC__)
/* ---- both GPU compilers: the CUDA names, which HIP shares ---- */
#define CA_KERNEL extern "C" __global__ void __launch_bounds__(1024)
#define CA_DEV static __device__ __forceinline__
#define CA_TID threadIdx.x
#define CA_BID blockIdx.x
#define CA_BDIM blockDim.x
#define CA_GDIM gridDim.x
#define CA_SHARED(T, name, n) __shared__ T name[n]
/* before a loop of a constant count: unroll it whole (an array it indexes
 * then stays in registers) */
#define CA_UNROLLED _Pragma("unroll")
#define ca_sync() __syncthreads()
CA_DEV void ca_fence() { __threadfence_system(); }
CA_DEV u32 ca_cas(u32 *p, u32 cmp, u32 v) { return atomicCAS(p, cmp, v); }
CA_DEV float ca_as_float(u32 x) { return __uint_as_float(x); }
CA_DEV u32 ca_as_u32(float f) { return __float_as_uint(f); }
/* Global memory through these, so the host build can check each access;
 * here they are the plain access. Each must be naturally aligned. */
template <typename T> CA_DEV T ca_ld(const T *p) { return *p; }
template <typename T> CA_DEV void ca_st(T *p, T v) { *p = v; }
CA_DEV u32 ca_ld_volatile(const u32 *p) { return *(const volatile u32 *)p; }
CA_DEV void ca_st_volatile(u32 *p, u32 v) { *(volatile u32 *)p = v; }
#endif

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
/* ---- CUDA (NVRTC) ---- */
/* The aligned variants: at most 512 threads a block (the device heap's),
 * and registers for 3 such blocks a multiprocessor (at most 40 on sm_70
 * and later: 64 K registers / 1,536 threads, in warp units of 256). */
#define CA_KERNEL_ALIGNED extern "C" __global__ void __launch_bounds__(512, 3)
/* PTX ISA 6.0 (sm_70): st.release / ld.acquire at system scope. */
CA_DEV void ca_st_release(u32 *p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
CA_DEV u32 ca_ld_acquire(const u32 *p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/* The same for an aligned 64-bit word, one single-copy-atomic access. */
CA_DEV void ca_st_release64(u64 *p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
CA_DEV u64 ca_ld_acquire64(const u64 *p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
/* An atomic add with release semantics at system scope (a peer's signal
 * slot, over P2P). */
CA_DEV void ca_add_release(u32 *p, u32 v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
/* %globaltimer: nanoseconds. */
CA_DEV u64 ca_timer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
CA_DEV void ca_pause() { __nanosleep(100); }

#elif defined(__HIPCC_RTC__) || defined(__HIPCC__)
/* ---- HIP (hiprtc) ---- */
/* HIP's second __launch_bounds__ argument counts waves per execution unit,
 * not blocks: only the block size is bounded. */
#define CA_KERNEL_ALIGNED extern "C" __global__ void __launch_bounds__(512)
/* clang's __atomic builtins are system scope on AMDGPU. */
CA_DEV void ca_st_release(u32 *p, u32 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
CA_DEV u32 ca_ld_acquire(const u32 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
CA_DEV void ca_st_release64(u64 *p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
CA_DEV u64 ca_ld_acquire64(const u64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
CA_DEV void ca_add_release(u32 *p, u32 v) { __atomic_fetch_add(p, v, __ATOMIC_RELEASE); }
/* wall_clock64: a constant-rate counter (hipDeviceAttributeWallClockRate
 * kHz); the host converts the timeout into its ticks. */
CA_DEV u64 ca_timer() { return wall_clock64(); }
CA_DEV void ca_pause() { __builtin_amdgcn_s_sleep(2); }

#else
/* ---- host (the fake runtimes) ----
 * A GPU model strict enough to fail where a GPU faults. Every block of a
 * launch runs on a worker thread of a persistent pool (grown on demand,
 * idle workers reused), so all the blocks of every concurrent launch run
 * at once, as their cross-rank spin waits need. The threads of a block
 * are fibers (ucontext) on their block's worker: they switch at the block
 * barrier (ca_sync) and in spin waits (ca_pause; ca_ld_acquire now and
 * then), so a spin loop must call ca_pause or ca_ld_acquire, as on a GPU
 * it would burn its warp's issue slots. Every global-memory access goes
 * through ca_ld/ca_st/the atomics, which check its natural alignment and
 * ask the runtime's access() whether the memory is there (ca_check). The
 * first fault ends the launch with the runtime's code: later accesses are
 * skipped (loads give 0) and every thread unwinds at its next barrier or
 * spin wait. */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#define CA_KERNEL static void
#define CA_KERNEL_ALIGNED static void
#define CA_UNROLLED
#define CA_DEV static inline

/* What the runtime tells the executor about a launch: the contract of
 * capalloc_host_launch (collectives.cu), mirrored in C by
 * internal/fakegpu/core.c. */
struct ca_host_env {
  int device; /* the device of the launching stream */
  void *ctx;  /* passed back to access() */
  /* access: 0 when [p, p+n) may be read (write 0) or written (1) from a
   * launch on device, else the runtime's code the launch fails with.
   * Called after the natural-alignment check; NULL: all allowed. */
  int (*access)(void *ctx, int device, const void *p, unsigned long n, int write);
  /* residency: sms multiprocessors holding blocks_per_sm blocks of this
   * kernel at this block size each (0 in either: no limit). */
  unsigned sms, blocks_per_sm;
  int misaligned_code; /* the runtime's code for a misaligned address */
};

/* The block-shared bytes a kernel may declare with CA_SHARED. */
#define CA_HOST_SHARED_BYTES 1024

/* A launch: its kernel, configuration and first fault. */
struct ca_launch {
  const ca_host_env *env;
  void (*fn)(const void *);
  const void *params;
  u32 grid, bdim;
  int misaligned;
  int fault; /* the first fault's code (0: none), set once */
  /* the first fault's access, for the runtime's log */
  const void *fault_p;
  unsigned long fault_n;
  int fault_write;
  u32 fault_bid, fault_tid;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  u32 done; /* blocks finished */
};
struct ca_thread;
/* A block: its fibers, their scheduler state and the block barrier, and
 * its shared memory. Only its worker touches it while it runs. */
struct ca_block {
  ca_launch *l;
  u32 bid;
  ca_thread *t;          /* bdim fibers */
  u32 cur;               /* the running fiber */
  u32 live;              /* fibers not finished */
  u32 arrived, gen;      /* the barrier: fibers waiting, generation */
  unsigned cost;         /* residency units held (0: none) */
  ucontext_t home;       /* the worker's scheduler */
  alignas(16) unsigned char shared[CA_HOST_SHARED_BYTES];
};
enum { CA_RUN = 0, CA_AT_SYNC = 1, CA_DONE = 2 };
struct ca_thread {
  u32 tid, bid, bdim, gdim;
  ca_block *blk;
  u32 state, wait_gen, loads;
  ucontext_t ctx;
};
static __thread ca_thread *ca_self;
/* ca_unwind is thrown to end a thread of a launch that faulted. */
struct ca_unwind {};

#define CA_TID (ca_self->tid)
#define CA_BID (ca_self->bid)
#define CA_BDIM (ca_self->bdim)
#define CA_GDIM (ca_self->gdim)
#define CA_SHARED(T, name, n)                                                   \
  static_assert(sizeof(T) * (n) <= CA_HOST_SHARED_BYTES, "block-shared bytes"); \
  T *name = (T *)(void *)ca_self->blk->shared

CA_DEV bool ca_faulted() { return __atomic_load_n(&ca_self->blk->l->fault, __ATOMIC_ACQUIRE) != 0; }

/* ca_fault records the launch's first fault. */
CA_DEV void ca_fault(int code, const void *p, unsigned long n, int write) {
  ca_launch *l = ca_self->blk->l;
  int none = 0;
  if (__atomic_compare_exchange_n(&l->fault, &none, -1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    l->fault_p = p;
    l->fault_n = n;
    l->fault_write = write;
    l->fault_bid = ca_self->bid;
    l->fault_tid = ca_self->tid;
    __atomic_store_n(&l->fault, code, __ATOMIC_RELEASE);
  }
}

/* ca_check: may the running thread access [p, p+n) (n a power of two, the
 * access's natural alignment)? A GPU faults on a misaligned word or
 * vector access and on memory that is not there; so does this. */
CA_DEV bool ca_check(const void *p, unsigned long n, int write) {
  ca_launch *l = ca_self->blk->l;
  if (__atomic_load_n(&l->fault, __ATOMIC_ACQUIRE) != 0) return false;
  if ((uintptr_t)p & (n - 1u)) {
    ca_fault(l->misaligned, p, n, write);
    return false;
  }
  const ca_host_env *e = l->env;
  if (e && e->access) {
    int code = e->access(e->ctx, e->device, p, n, write);
    if (code != 0) {
      ca_fault(code, p, n, write);
      return false;
    }
  }
  return true;
}

/* ca_next switches to the next fiber of the block that can run, round
 * robin; false when none but the running one can. */
CA_DEV bool ca_next() {
  ca_thread *me = ca_self;
  ca_block *b = me->blk;
  u32 n = b->l->bdim;
  for (u32 k = 1, i = b->cur + 1; k < n; k++, i++) {
    if (i == n) i = 0;
    ca_thread *t = &b->t[i];
    if (t->state == CA_DONE || (t->state == CA_AT_SYNC && t->wait_gen == b->gen)) continue;
    b->cur = i;
    ca_self = t;
    swapcontext(&me->ctx, &t->ctx);
    return true; /* resumed: whoever switched back set ca_self to me */
  }
  return false;
}

/* ca_sync is __syncthreads: every live thread of the block arrives before
 * any goes on. Threads that ended count as arrived (a GPU's exited
 * threads do not hold a barrier). */
CA_DEV void ca_sync() {
  if (ca_faulted()) throw ca_unwind();
  ca_thread *me = ca_self;
  ca_block *b = me->blk;
  if (++b->arrived == b->live) {
    b->arrived = 0;
    b->gen++;
  } else {
    me->state = CA_AT_SYNC;
    me->wait_gen = b->gen;
    while (b->gen == me->wait_gen)
      if (!ca_next()) abort(); /* unreachable: the last arrival releases the barrier */
    me->state = CA_RUN;
  }
  if (ca_faulted()) throw ca_unwind();
}

/* ca_pause: a spin wait's pause. The worker's OS thread yields (other
 * blocks, other ranks' kernels run), then the block's next fiber runs. */
CA_DEV void ca_pause() {
  if (ca_faulted()) throw ca_unwind();
  sched_yield();
  ca_next();
  if (ca_faulted()) throw ca_unwind();
}

/* Global memory: plain, volatile and atomic accesses, checked. */
template <typename T> CA_DEV T ca_ld(const T *p) { return ca_check(p, sizeof(T), 0) ? *p : T{}; }
template <typename T> CA_DEV void ca_st(T *p, T v) {
  if (ca_check(p, sizeof(T), 1)) *p = v;
}
CA_DEV u32 ca_ld_volatile(const u32 *p) { return ca_check(p, 4, 0) ? *(const volatile u32 *)p : 0u; }
CA_DEV void ca_st_volatile(u32 *p, u32 v) {
  if (ca_check(p, 4, 1)) *(volatile u32 *)p = v;
}
CA_DEV void ca_st_release(u32 *p, u32 v) {
  if (ca_check(p, 4, 1)) __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
/* An acquire load is what a spin wait polls: every 64th one pauses, so a
 * loop on it alone cannot starve the fibers it waits for. */
CA_DEV u32 ca_ld_acquire(const u32 *p) {
  if ((++ca_self->loads & 63u) == 0u) ca_pause();
  return ca_check(p, 4, 0) ? __atomic_load_n(p, __ATOMIC_ACQUIRE) : 0u;
}
CA_DEV void ca_st_release64(u64 *p, u64 v) {
  if (ca_check(p, 8, 1)) __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
CA_DEV u64 ca_ld_acquire64(const u64 *p) {
  if ((++ca_self->loads & 63u) == 0u) ca_pause();
  return ca_check(p, 8, 0) ? __atomic_load_n(p, __ATOMIC_ACQUIRE) : 0ull;
}
CA_DEV void ca_add_release(u32 *p, u32 v) {
  if (ca_check(p, 4, 1)) __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}
CA_DEV u32 ca_cas(u32 *p, u32 cmp, u32 v) {
  if (!ca_check(p, 4, 1)) return ~cmp; /* not swapped */
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
CA_DEV void ca_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
CA_DEV u64 ca_timer() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}
CA_DEV float ca_as_float(u32 x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
CA_DEV u32 ca_as_u32(float f) {
  u32 x;
  memcpy(&x, &f, 4);
  return x;
}
#endif

#endif
