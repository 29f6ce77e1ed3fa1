/* A stand-in libnccl for the nccl package's tests (no GPU, no NCCL): it
 * exports what nccl binds, with NCCL's signatures (nccl.h), and records
 * what ncclCommInitRank received so a test can check that the 128-byte
 * ncclUniqueId passed by value crossed purego intact, with the arguments
 * around it. ncclGetUniqueId puts "env:" and NCCL_COMM_ID into the id when
 * that variable is set (as NCCL derives the id from it), else a counter
 * pattern; rank 0's ncclCommInitRank of such an id fails unless the
 * variable is still set (NCCL starts the root there). Windows (ncclMemAlloc, ncclCommWindowRegister) are left out
 * with -DFAKE_NO_WINDOWS, as in NCCL before 2.27. -DFAKE_RCCL makes it an
 * RCCL: it also exports ncclAllToAllv, RCCL's own (rccl.h, under
 * RCCL_ALLTOALLV). -DFAKE_VERSION=N sets the version code ncclGetVersion
 * reports (default 22803, 2.28.3). */
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static ncclUniqueId last_id;
static int last_nranks = -1, last_rank = -1, inits, counter;

#ifndef FAKE_VERSION
#define FAKE_VERSION 22803
#endif
ncclResult_t ncclGetVersion(int *v) { *v = FAKE_VERSION; return 0; }
const char *ncclGetErrorString(ncclResult_t r) { return r == 4 ? "invalid argument (fake)" : "fake error"; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  if (!id) return 4;
  memset(id, 0, sizeof *id);
  const char *env = getenv("NCCL_COMM_ID");
  if (env) {
    strcpy(id->internal, "env:");
    strncat(id->internal, env, sizeof id->internal - 5);
    return 0;
  }
  pthread_mutex_lock(&mu);
  int c = ++counter;
  pthread_mutex_unlock(&mu);
  for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + c);
  return 0;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks) return 4;
  /* NCCL's rank 0 starts the bootstrap root in ncclCommInitRank when
   * NCCL_COMM_ID is set (init.cc, ncclCommInitRankDev): an id derived from
   * the variable needs it still set there, or no root would listen. */
  if (rank == 0 && strncmp(id.internal, "env:", 4) == 0) {
    const char *env = getenv("NCCL_COMM_ID");
    if (!env || strncmp(env, id.internal + 4, sizeof id.internal - 5) != 0) return 4;
  }
  pthread_mutex_lock(&mu);
  last_id = id;
  last_nranks = nranks;
  last_rank = rank;
  inits++;
  pthread_mutex_unlock(&mu);
  *comm = (ncclComm_t)(unsigned long)(0x1000 + rank);
  return 0;
}

/* fake_last_init copies what the last ncclCommInitRank received and
 * returns how many were made. */
int fake_last_init(char *id, int *nranks, int *rank) {
  pthread_mutex_lock(&mu);
  memcpy(id, last_id.internal, 128);
  *nranks = last_nranks;
  *rank = last_rank;
  int n = inits;
  pthread_mutex_unlock(&mu);
  return n;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devs) {
  for (int i = 0; i < n; i++) comms[i] = (ncclComm_t)(unsigned long)(0x1000 + i);
  return 0;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) { return c ? 0 : 4; }
static const void *ar_send;
static void *ar_recv;
static size_t ar_count;
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  pthread_mutex_lock(&mu);
  ar_send = s; ar_recv = r; ar_count = n;
  pthread_mutex_unlock(&mu);
  return 0;
}
/* fake_last_allreduce reports the last ncclAllReduce's buffers and count. */
void fake_last_allreduce(const void **s, void **r, size_t *n) {
  pthread_mutex_lock(&mu);
  *s = ar_send; *r = ar_recv; *n = ar_count;
  pthread_mutex_unlock(&mu);
}

#ifndef FAKE_NO_WINDOWS
typedef void *ncclWindow_t;
static int windows, last_win_flags = -1;
static size_t last_win_size;
ncclResult_t ncclMemAlloc(void **p, size_t n) {
  if (!p || !n) return 4;
  *p = calloc(1, n);
  return *p ? 0 : 2;
}
ncclResult_t ncclMemFree(void *p) { free(p); return 0; }
ncclResult_t ncclCommWindowRegister(ncclComm_t c, void *buf, size_t n, ncclWindow_t *w, int flags) {
  if (!c || !buf || !w) return 4;
  pthread_mutex_lock(&mu);
  windows++;
  last_win_flags = flags;
  last_win_size = n;
  pthread_mutex_unlock(&mu);
  *w = (ncclWindow_t)((char *)buf + 1); /* any non-null handle */
  return 0;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t c, ncclWindow_t w) {
  if (!c || !w) return 4;
  pthread_mutex_lock(&mu);
  windows--;
  pthread_mutex_unlock(&mu);
  return 0;
}
/* fake_windows returns how many windows are registered, and the last
 * registration's flags and size. */
int fake_windows(int *flags, size_t *n) {
  pthread_mutex_lock(&mu);
  *flags = last_win_flags; *n = last_win_size;
  int w = windows;
  pthread_mutex_unlock(&mu);
  return w;
}
#endif
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) { return 0; }
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) { return 0; }
ncclResult_t ncclGroupStart(void) { return 0; }
ncclResult_t ncclGroupEnd(void) { return 0; }
ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, void *st) { return 0; }
ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, void *st) { return 0; }

#ifdef FAKE_RCCL
/* rccl.h: ncclAllToAllv(const void *sendbuff, const size_t sendcounts[],
 * const size_t sdispls[], void *recvbuff, const size_t recvcounts[],
 * const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
 * hipStream_t stream). Only its presence matters here. */
ncclResult_t ncclAllToAllv(const void *s, const size_t *sc, const size_t *sd, void *r, const size_t *rc, const size_t *rd, int t, ncclComm_t c, void *st) { return 0; }
#endif
