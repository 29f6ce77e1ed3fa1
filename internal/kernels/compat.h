/* compat.h: the few primitives the kernels use, for the three compilers
 * that build collectives.cu:
 *   NVRTC (CUDA, __CUDACC_RTC__): PTX for compute_70 and later;
 *   hiprtc (HIP, __HIPCC_RTC__): a code object for the device's gfx arch;
 *   g++ (the fake runtimes, CAPALLOC_HOST): host code in which every GPU
 *   thread of a launch is a real thread (capalloc_host_launch below), so
 *   cross-rank spin waits, __syncthreads and the timeouts behave as on a
 *   GPU and the kernels' logic is tested without one.
 * Only what the kernels need is here: thread and block indices, the block
 * barrier, one block-shared array, system-scope release stores and acquire
 * loads (32- and 64-bit), a compare-and-swap, a global timer and a pause in spin loops. */
#ifndef CAPALLOC_COMPAT_H
#define CAPALLOC_COMPAT_H

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

#if defined(__CUDACC_RTC__) || defined(__CUDACC__) || defined(__HIPCC_RTC__) || defined(__HIPCC__)
/* ---- both GPU compilers: the CUDA names, which HIP shares ---- */
#define CA_KERNEL extern "C" __global__ void __launch_bounds__(1024)
#define CA_DEV static __device__ __forceinline__
#define CA_TID threadIdx.x
#define CA_BID blockIdx.x
#define CA_BDIM blockDim.x
#define CA_GDIM gridDim.x
#define CA_SHARED(T, name, n) __shared__ T name[n]
#define ca_sync() __syncthreads()
CA_DEV void ca_fence() { __threadfence_system(); }
CA_DEV u32 ca_cas(u32 *p, u32 cmp, u32 v) { return atomicCAS(p, cmp, v); }
CA_DEV float ca_as_float(u32 x) { return __uint_as_float(x); }
CA_DEV u32 ca_as_u32(float f) { return __float_as_uint(f); }
#endif

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
/* ---- CUDA (NVRTC) ---- */
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
/* %globaltimer: nanoseconds. */
CA_DEV u64 ca_timer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
CA_DEV void ca_pause() { __nanosleep(100); }

#elif defined(__HIPCC_RTC__) || defined(__HIPCC__)
/* ---- HIP (hiprtc) ---- */
/* clang's __atomic builtins are system scope on AMDGPU. */
CA_DEV void ca_st_release(u32 *p, u32 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
CA_DEV u32 ca_ld_acquire(const u32 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
CA_DEV void ca_st_release64(u64 *p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
CA_DEV u64 ca_ld_acquire64(const u64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
/* wall_clock64: a constant-rate counter (hipDeviceAttributeWallClockRate
 * kHz); the host converts the timeout into its ticks. */
CA_DEV u64 ca_timer() { return wall_clock64(); }
CA_DEV void ca_pause() { __builtin_amdgcn_s_sleep(2); }

#else
/* ---- host (the fake runtimes) ---- */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CA_KERNEL static void
#define CA_DEV static inline

/* The block-shared bytes a kernel may declare with CA_SHARED. */
#define CA_HOST_SHARED_BYTES 1024
struct ca_block {
  pthread_barrier_t bar;
  alignas(16) unsigned char shared[CA_HOST_SHARED_BYTES];
};
struct ca_thread {
  u32 tid, bid, bdim, gdim;
  ca_block *blk;
  void (*fn)(const void *);
  const void *params;
};
static __thread ca_thread *ca_self;
#define CA_TID (ca_self->tid)
#define CA_BID (ca_self->bid)
#define CA_BDIM (ca_self->bdim)
#define CA_GDIM (ca_self->gdim)
#define CA_SHARED(T, name, n)                                                   \
  static_assert(sizeof(T) * (n) <= CA_HOST_SHARED_BYTES, "block-shared bytes"); \
  T *name = (T *)(void *)ca_self->blk->shared
#define ca_sync() pthread_barrier_wait(&ca_self->blk->bar)
CA_DEV void ca_st_release(u32 *p, u32 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
CA_DEV u32 ca_ld_acquire(const u32 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
CA_DEV void ca_st_release64(u64 *p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
CA_DEV u64 ca_ld_acquire64(const u64 *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
CA_DEV u32 ca_cas(u32 *p, u32 cmp, u32 v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
CA_DEV void ca_fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
CA_DEV u64 ca_timer() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (u64)ts.tv_sec * 1000000000ull + (u64)ts.tv_nsec;
}
CA_DEV void ca_pause() { sched_yield(); }
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
