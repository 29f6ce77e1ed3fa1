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
 * reports (default 22803, 2.28.3). -DFAKE_NO_SPLIT leaves out ncclCommSplit,
 * as in NCCL before 2.18; -DFAKE_NO_CONFIG leaves out ncclCommInitRankConfig,
 * as in NCCL before 2.14 (RCCL before 2.15.5).
 *
 * Configs (ncclCommInitRankConfig, ncclCommSplit's config) are read as
 * NCCL's parseCommConfig reads them (init.cc): size bytes, capped at the
 * library's own sizeof(ncclConfig_t), over NCCL_CONFIG_INITIALIZER; a
 * magic other than 0xcafebeef, or a field out of range, is
 * ncclInvalidArgument; fields newer than the config's version are reset.
 * Before 2.17 (FAKE_VERSION) the struct is 2.14's (blocking only, which
 * must be 0 or 1). fake_last_config reports the bytes received. A
 * nonblocking communicator (blocking = 0) answers its init, its split and
 * its collectives with ncclInProgress, and ncclCommGetAsyncError reports
 * ncclInProgress FAKE_POLLS times before success; a split's new handle is
 * written when the parent's split completes, as NCCL writes *newcomm from
 * its thread.
 *
 * Communicators are fcomm records that are never freed, so a call into one
 * that was destroyed or aborted is caught and counted (fake_misuse), not a
 * use after free. Group state is the calling thread's, as in NCCL
 * (group.cc keeps ncclGroupDepth thread-local): an operation queued on
 * another thread than ncclGroupStart's is outside the group. Every
 * communication call is logged (fake_log) with the outermost group it
 * belongs to, so tests see order and grouping. fake_hang sets the "never
 * completes" modes: FAKE_HANG_BLOCK makes communication calls (and
 * ncclGroupEnd, ncclCommSplit) block until a communicator they use is
 * aborted, as a blocking communicator waiting for a dead peer;
 * FAKE_HANG_PROGRESS makes them return ncclInProgress and
 * ncclCommGetAsyncError report ncclInProgress until ncclCommAbort, as a
 * nonblocking communicator whose peer never answers.
 *
 * Moving data (p2p_*, below): with FAKE_NCCL_RUNTIME naming the GPU
 * runtime library the backend loaded (a fake cudart, or a fake
 * libamdhip64 for -DFAKE_RCCL), ncclSend and ncclRecv move their bytes
 * between the ranks of one unique id, in other processes, through a file
 * both map: each transfer is a host function enqueued on the call's stream
 * with the runtime's LaunchHostFunc, so it runs in stream order and a
 * capture records it for every replay, as NCCL's kernels are. Without the
 * variable nothing moves (the calls are only logged). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdio.h>
#include <limits.h>
#include <time.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct fcomm *ncclComm_t;
typedef int ncclResult_t;

enum { FAKE_LIVE, FAKE_DESTROYED, FAKE_ABORTED };
struct p2p_seg;
static void p2p_fresh_id(ncclUniqueId *id);
static ncclResult_t p2p_join(ncclComm_t c, const ncclUniqueId *id);
static void p2p_leave(ncclComm_t c);
static ncclResult_t p2p_op(int send, ncclComm_t c, void *buf, size_t n, int t, int peer, void *stream);
static ncclResult_t p2p_flush(ncclResult_t r);
struct fcomm {
  int rank, nranks, id, state; struct p2p_seg *seg; char *path;
  int blocking, pending;            /* pending: polls still answered ncclInProgress */
  ncclComm_t *split_out;            /* a pending split's *newcomm, written when it completes */
  int split_blocking;               /* and its new communicator's mode */
};
static pthread_cond_t aborted_cv = PTHREAD_COND_INITIALIZER;
static int comm_ids, misuse, hang_mode, live_comms;
enum { FAKE_HANG_NONE, FAKE_HANG_BLOCK, FAKE_HANG_PROGRESS };

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
  p2p_fresh_id(id);
  return 0;
}

static ncclComm_t new_comm_locked(int rank, int nranks) {
  struct fcomm *c = calloc(1, sizeof *c);
  c->rank = rank; c->nranks = nranks; c->id = ++comm_ids; c->blocking = 1;
  live_comms++;
  return c;
}
static ncclComm_t new_comm(int rank, int nranks) {
  pthread_mutex_lock(&mu);
  ncclComm_t c = new_comm_locked(rank, nranks);
  pthread_mutex_unlock(&mu);
  return c;
}

/* ncclConfig_v21700 (nccl.h.in of NCCL 2.17.1). */
typedef struct {
  size_t size;
  unsigned int magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
} ncclConfig_t;
#define FAKE_UNDEF INT_MIN
#ifndef FAKE_POLLS
#define FAKE_POLLS 3
#endif
static unsigned char last_cfg[sizeof(ncclConfig_t)];
static size_t last_cfg_size, last_cfg_copied;
static char last_cfg_net[64];
static int configs;

/* parse_config reads cfg as parseCommConfig does into *out; it records
 * what it received. */
static ncclResult_t parse_config(const ncclConfig_t *cfg, ncclConfig_t *out) {
  ncclConfig_t in = {sizeof in, 0, FAKE_VERSION, FAKE_UNDEF, FAKE_UNDEF, FAKE_UNDEF, FAKE_UNDEF, NULL};
  size_t own = FAKE_VERSION < 21700 ? offsetof(ncclConfig_t, cgaClusterSize) + sizeof(int) : sizeof in; /* 2.14: 24 */
  size_t size;
  memcpy(&size, cfg, sizeof size);
  size_t n = size > own ? own : size;
  memcpy(&in, cfg, n);
  pthread_mutex_lock(&mu);
  configs++;
  last_cfg_size = size;
  last_cfg_copied = n;
  memset(last_cfg, 0, sizeof last_cfg);
  memcpy(last_cfg, cfg, size > sizeof last_cfg ? sizeof last_cfg : size);
  last_cfg_net[0] = 0;
  if (n == sizeof in && in.netName) snprintf(last_cfg_net, sizeof last_cfg_net, "%s", in.netName);
  pthread_mutex_unlock(&mu);
  if (in.magic != 0xcafebeef) return 4;
  if (FAKE_VERSION < 21700) {
    if (in.blocking != 0 && in.blocking != 1) return 4; /* 2.14 to 2.16 have no unset value */
    in.cgaClusterSize = in.minCTAs = in.maxCTAs = FAKE_UNDEF;
    in.netName = NULL;
  }
  if (in.version < 21400) in.blocking = FAKE_UNDEF;
  if (in.version < 21700) { in.cgaClusterSize = in.minCTAs = in.maxCTAs = FAKE_UNDEF; in.netName = NULL; }
  if (in.blocking != FAKE_UNDEF && in.blocking != 0 && in.blocking != 1) return 4;
  if (in.cgaClusterSize != FAKE_UNDEF && in.cgaClusterSize < 0) return 4;
  if ((in.minCTAs != FAKE_UNDEF && in.minCTAs <= 0) || (in.maxCTAs != FAKE_UNDEF && in.maxCTAs <= 0) || in.minCTAs > in.maxCTAs) return 4;
  if (in.blocking == FAKE_UNDEF) in.blocking = 1;
  *out = in;
  return 0;
}

/* fake_last_config copies the bytes of the last config received (at most
 * cap) and the network name it pointed at; it returns its size field, and
 * the number of configs received in *count. */
size_t fake_last_config(unsigned char *raw, size_t cap, char *net, size_t ncap, int *count) {
  pthread_mutex_lock(&mu);
  memcpy(raw, last_cfg, cap < sizeof last_cfg ? cap : sizeof last_cfg);
  snprintf(net, ncap, "%s", last_cfg_net);
  *count = configs;
  size_t n = last_cfg_size;
  pthread_mutex_unlock(&mu);
  return n;
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
  *comm = new_comm(rank, nranks);
  return p2p_join(*comm, &id);
}

#ifndef FAKE_NO_CONFIG
static int init_delay_ms; /* fake_init_delay: a blocking init's time */
/* fake_init_delay makes a blocking ncclCommInitRankConfig take ms. */
void fake_init_delay(int ms) {
  pthread_mutex_lock(&mu);
  init_delay_ms = ms;
  pthread_mutex_unlock(&mu);
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
  ncclConfig_t cfg = {0};
  cfg.blocking = 1;
  if (config) {
    ncclResult_t r = parse_config(config, &cfg);
    if (r) return r;
  }
  ncclResult_t r = ncclCommInitRank(comm, nranks, id, rank);
  if (r) return r;
  if (cfg.blocking) {
    pthread_mutex_lock(&mu);
    int ms = init_delay_ms;
    pthread_mutex_unlock(&mu);
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
  }
  pthread_mutex_lock(&mu);
  (*comm)->blocking = 0;
  (*comm)->pending = FAKE_POLLS;
  pthread_mutex_unlock(&mu);
  return 7; /* ncclInProgress: made in the background */
}
#endif

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
  for (int i = 0; i < n; i++) comms[i] = new_comm(i, n);
  return 0;
}

/* live checks c under mu: a call into a destroyed or aborted communicator
 * is counted as misuse and refused. */
static int live(ncclComm_t c) {
  if (!c) return 0;
  if (c->state != FAKE_LIVE) { misuse++; return 0; }
  return 1;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  pthread_mutex_lock(&mu);
  int ok = live(c);
  if (ok) { c->state = FAKE_DESTROYED; live_comms--; }
  pthread_mutex_unlock(&mu);
  if (ok) p2p_leave(c);
  return ok ? 0 : 4;
}
ncclResult_t ncclCommAbort(ncclComm_t c) {
  pthread_mutex_lock(&mu);
  int ok = live(c);
  if (ok) { c->state = FAKE_ABORTED; live_comms--; }
  pthread_cond_broadcast(&aborted_cv);
  pthread_mutex_unlock(&mu);
  if (ok) p2p_leave(c);
  return ok ? 0 : 4;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
  pthread_mutex_lock(&mu);
  int ok = live(c) && r;
  if (ok && hang_mode == FAKE_HANG_PROGRESS) *r = 7;
  else if (ok && c->pending > 0) {
    *r = 7;
    if (--c->pending == 0 && c->split_out) { /* the split completes */
      ncclComm_t n = new_comm_locked(c->rank, c->nranks);
      n->blocking = c->split_blocking;
      *c->split_out = n;
      c->split_out = NULL;
    }
  } else if (ok) *r = 0;
  pthread_mutex_unlock(&mu);
  return ok ? 0 : 4;
}
/* comm_int reads the int at offset off of a live communicator into out,
   under the lock: the count and rank getters. */
static ncclResult_t comm_int(const ncclComm_t c, size_t off, int *out) {
  pthread_mutex_lock(&mu);
  int ok = live(c) && out;
  if (ok) *out = *(const int *)((const char *)c + off);
  pthread_mutex_unlock(&mu);
  return ok ? 0 : 4;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
  return comm_int(c, offsetof(struct fcomm, nranks), n);
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank) {
  return comm_int(c, offsetof(struct fcomm, rank), rank);
}

/* fake_hang sets the never-completes mode (FAKE_HANG_*). */
void fake_hang(int mode) {
  pthread_mutex_lock(&mu);
  hang_mode = mode;
  pthread_mutex_unlock(&mu);
}
/* fake_live counts the communicators neither destroyed nor aborted. */
int fake_live(void) {
  pthread_mutex_lock(&mu);
  int n = 0;
  n = live_comms;
  pthread_mutex_unlock(&mu);
  return n;
}
/* fake_misuse counts calls made into destroyed or aborted communicators. */
int fake_misuse(void) {
  pthread_mutex_lock(&mu);
  int n = misuse;
  pthread_mutex_unlock(&mu);
  return n;
}

/* The call log: one line per communication call, "op comm=ID rank=R
 * peer=P n=N g=G", G the outermost group (0: none). */
static char logbuf[1 << 16];
static size_t loglen;
static __thread int group_depth, group_seq, group_hang;
static __thread ncclComm_t group_comm; /* a communicator the open group uses */
static int groups;
static void logf_locked(const char *op, ncclComm_t c, int peer, size_t n) {
  char line[160];
  int k = snprintf(line, sizeof line, "%s comm=%d rank=%d peer=%d n=%zu g=%d\n", op, c ? c->id : 0, c ? c->rank : -1, peer, n, group_depth ? group_seq : 0);
  if (k > 0 && loglen + (size_t)k < sizeof logbuf) { memcpy(logbuf + loglen, line, (size_t)k); loglen += (size_t)k; }
}
/* fake_log copies the log into out (NUL-terminated) and empties it. */
size_t fake_log(char *out, size_t cap) {
  pthread_mutex_lock(&mu);
  size_t n = loglen < cap - 1 ? loglen : cap - 1;
  memcpy(out, logbuf, n);
  out[n] = 0;
  loglen = 0;
  pthread_mutex_unlock(&mu);
  return n;
}

/* hang waits, under mu, until c is aborted; it returns the result the
 * interrupted call gives. */
static ncclResult_t hang_locked(ncclComm_t c) {
  while (c->state == FAKE_LIVE) pthread_cond_wait(&aborted_cv, &mu);
  return 3;
}

/* op is every communication call: checked, logged, grouped; in a hang
 * mode it never completes (outside a group; in one, ncclGroupEnd does). */
static ncclResult_t op(const char *name, ncclComm_t c, int peer, size_t n) {
  pthread_mutex_lock(&mu);
  if (!live(c)) { pthread_mutex_unlock(&mu); return 4; }
  if (peer < -1 || peer >= c->nranks) { pthread_mutex_unlock(&mu); return 4; }
  logf_locked(name, c, peer, n);
  ncclResult_t r = 0;
  if (group_depth) {
    group_comm = c;
    group_hang = hang_mode;
  } else if (hang_mode == FAKE_HANG_BLOCK) {
    r = hang_locked(c);
  } else if (hang_mode == FAKE_HANG_PROGRESS) {
    r = 7;
  } else if (!c->blocking) {
    c->pending = FAKE_POLLS;
    r = 7;
  }
  pthread_mutex_unlock(&mu);
  return r;
}
static const void *ar_send;
static void *ar_recv;
static size_t ar_count;
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int o, ncclComm_t c, void *st) {
  pthread_mutex_lock(&mu);
  ar_send = s; ar_recv = r; ar_count = n;
  pthread_mutex_unlock(&mu);
  return op("allreduce", c, -1, n);
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
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) { return op("allgather", c, -1, n); }
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int o, ncclComm_t c, void *st) { return op("reducescatter", c, -1, n); }
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, void *st) {
  if (root < 0) return 4;
  return op("broadcast", c, root, n);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, int t, int o, int root, ncclComm_t c, void *st) {
  if (root < 0) return 4;
  return op("reduce", c, root, n);
}
ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, void *st) {
  if (peer < 0) return 4;
  ncclResult_t r = op("send", c, peer, n);
  return r ? r : p2p_op(1, c, (void *)s, n, t, peer, st);
}
ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, void *st) {
  if (peer < 0) return 4;
  ncclResult_t res = op("recv", c, peer, n);
  return res ? res : p2p_op(0, c, r, n, t, peer, st);
}
ncclResult_t ncclGroupStart(void) {
  if (group_depth++ == 0) {
    pthread_mutex_lock(&mu);
    group_seq = ++groups;
    pthread_mutex_unlock(&mu);
    group_comm = 0;
    group_hang = 0;
  }
  return 0;
}
ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return 5; /* ncclInvalidUsage: no group open on this thread */
  if (--group_depth > 0) return 0;
  pthread_mutex_lock(&mu);
  ncclResult_t r = 0;
  char line[64];
  int k = snprintf(line, sizeof line, "end g=%d\n", group_seq);
  if (k > 0 && loglen + (size_t)k < sizeof logbuf) { memcpy(logbuf + loglen, line, (size_t)k); loglen += (size_t)k; }
  if (group_comm && group_hang == FAKE_HANG_BLOCK) r = hang_locked(group_comm);
  else if (group_comm && group_hang == FAKE_HANG_PROGRESS) r = 7;
  pthread_mutex_unlock(&mu);
  return p2p_flush(r);
}

#ifndef FAKE_NO_SPLIT
/* ncclCommSplit: the new communicator keeps the parent's size and rank
 * (the stand-in's peers are imaginary; color and key are logged). */
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *config) {
  if (!out || color < -1) return 4;
  ncclConfig_t cfg = {0};
  if (config) {
    ncclResult_t r = parse_config(config, &cfg);
    if (r) return r;
  }
  pthread_mutex_lock(&mu);
  if (!live(c)) { pthread_mutex_unlock(&mu); return 4; }
  char line[96];
  int k = snprintf(line, sizeof line, "split comm=%d color=%d key=%d config=%d\n", c->id, color, key, config != 0);
  if (k > 0 && loglen + (size_t)k < sizeof logbuf) { memcpy(logbuf + loglen, line, (size_t)k); loglen += (size_t)k; }
  if (hang_mode == FAKE_HANG_BLOCK) { ncclResult_t r = hang_locked(c); pthread_mutex_unlock(&mu); return r; }
  int blocking = config ? cfg.blocking : c->blocking;
  *out = 0;
  if (!c->blocking && color != -1) { /* in the parent's background: *out written when it completes */
    c->pending = FAKE_POLLS;
    c->split_out = out;
    c->split_blocking = blocking;
    pthread_mutex_unlock(&mu);
    return 7;
  }
  if (color != -1) {
    *out = new_comm_locked(c->rank, c->nranks);
    (*out)->blocking = blocking;
  }
  pthread_mutex_unlock(&mu);
  return 0;
}
#endif

#ifdef FAKE_RCCL
/* rccl.h: ncclAllToAllv(const void *sendbuff, const size_t sendcounts[],
 * const size_t sdispls[], void *recvbuff, const size_t recvcounts[],
 * const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
 * hipStream_t stream). Only its presence matters here. */
ncclResult_t ncclAllToAllv(const void *s, const size_t *sc, const size_t *sd, void *r, const size_t *rc, const size_t *rd, int t, ncclComm_t c, void *st) { return 0; }
#endif

/* ---- moving data between processes (FAKE_NCCL_RUNTIME) ----
 *
 * The ranks of one unique id share a file, TMPDIR/fakenccl-HASH, mapped by
 * each: one channel per ordered pair of ranks, a buffer of P2P_CHUNK bytes
 * with two counters (chunks put, chunks taken). A send puts its bytes
 * chunk by chunk, each when the channel is empty; a receive takes them,
 * each when one is there. So a send of one chunk never waits for its
 * receive to start, and within a group sends are launched before
 * receives: ranks that send to and receive from each other in one group
 * do not deadlock, whatever the order of the calls. A wait longer than
 * FAKE_NCCL_P2P_TIMEOUT seconds (default 60) ends the process with a
 * message: a host function cannot fail, and a peer that is gone would
 * otherwise hang it. The file is removed when every rank has destroyed or
 * aborted its communicator. Transfer records live as long as the graphs
 * that replay them may: they are never freed, like the communicators. */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define P2P_RANKS 8
#define P2P_CHUNK (64 << 10)
struct p2p_chan { unsigned long put, taken; size_t n; char data[P2P_CHUNK]; };
struct p2p_seg { int joined, left; struct p2p_chan ch[P2P_RANKS][P2P_RANKS]; /* [from][to] */ };
static int p2p_on(void) { return getenv("FAKE_NCCL_RUNTIME") != NULL; }

/* p2p_fresh_id makes the ids of different processes and runs differ: the
 * id names the shared file. */
static void p2p_fresh_id(ncclUniqueId *id) {
  if (!p2p_on()) return;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long v[3] = {(long)getpid(), (long)ts.tv_sec, ts.tv_nsec};
  memcpy(id->internal + 64, v, sizeof v);
}

static ncclResult_t p2p_join(ncclComm_t c, const ncclUniqueId *id) {
  if (!p2p_on()) return 0;
  if (c->nranks > P2P_RANKS) return 4;
  unsigned long long h = 1469598103934665603ULL; /* FNV-1a of the id */
  for (int i = 0; i < 128; i++) h = (h ^ (unsigned char)id->internal[i]) * 1099511628211ULL;
  const char *dir = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/fakenccl-%016llx", dir && *dir ? dir : "/tmp", h);
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0) return 2;
  void *m = MAP_FAILED;
  if (ftruncate(fd, sizeof(struct p2p_seg)) == 0) m = mmap(NULL, sizeof(struct p2p_seg), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return 2;
  c->seg = m;
  c->path = strdup(path);
  __atomic_add_fetch(&c->seg->joined, 1, __ATOMIC_SEQ_CST);
  return 0;
}

static void p2p_leave(ncclComm_t c) {
  if (!c->seg) return;
  if (__atomic_add_fetch(&c->seg->left, 1, __ATOMIC_SEQ_CST) == c->nranks) unlink(c->path);
}

/* A transfer: a host function's argument, one per ncclSend or ncclRecv
 * call (a replayed graph runs the same one again). */
struct p2p_xfer { int send; ncclComm_t c; char *buf; size_t bytes; int peer; void *stream; };

static size_t elem_size(int t) {
  switch (t) {
  case 0: case 1: return 1;         /* ncclInt8, ncclUint8 */
  case 2: case 3: case 7: return 4; /* ncclInt32, ncclUint32, ncclFloat32 */
  case 4: case 5: case 8: return 8; /* ncclInt64, ncclUint64, ncclFloat64 */
  case 6: case 9: return 2;         /* ncclFloat16, ncclBfloat16 */
  }
  return 0;
}

/* p2p_wait waits until *v reaches want (or, for a send, until the channel
 * is empty: taken reaches put); it ends the process past the timeout. */
static void p2p_wait(struct p2p_xfer *x, unsigned long *v, unsigned long want) {
  const char *e = getenv("FAKE_NCCL_P2P_TIMEOUT");
  long limit = (e && atol(e) > 0 ? atol(e) : 60) * 20000L; /* 50 us polls */
  for (long i = 0; __atomic_load_n(v, __ATOMIC_ACQUIRE) < want; i++) {
    if (__atomic_load_n(&x->c->state, __ATOMIC_ACQUIRE) != FAKE_LIVE) return;
    if (i == limit) {
      fprintf(stderr, "fakenccl: rank %d: %s of %zu B %s rank %d made no progress in %ld s: peer gone?\n", x->c->rank,
              x->send ? "send" : "recv", x->bytes, x->send ? "to" : "from", x->peer, limit / 20000L);
      _exit(70);
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

static void p2p_run(void *arg) {
  struct p2p_xfer *x = arg;
  struct p2p_chan *ch = x->send ? &x->c->seg->ch[x->c->rank][x->peer] : &x->c->seg->ch[x->peer][x->c->rank];
  size_t chunks = x->bytes ? (x->bytes + P2P_CHUNK - 1) / P2P_CHUNK : 1; /* an empty message still pairs */
  for (size_t k = 0; k < chunks; k++) {
    size_t off = k * P2P_CHUNK, n = x->bytes - off < P2P_CHUNK ? x->bytes - off : P2P_CHUNK;
    if (x->send) {
      unsigned long put = __atomic_load_n(&ch->put, __ATOMIC_ACQUIRE);
      p2p_wait(x, &ch->taken, put); /* the channel is empty */
      memcpy(ch->data, x->buf + off, n);
      ch->n = n;
      __atomic_store_n(&ch->put, put + 1, __ATOMIC_RELEASE);
    } else {
      unsigned long taken = __atomic_load_n(&ch->taken, __ATOMIC_ACQUIRE);
      p2p_wait(x, &ch->put, taken + 1); /* a chunk is there */
      memcpy(x->buf + off, ch->data, n < ch->n ? n : ch->n);
      __atomic_store_n(&ch->taken, taken + 1, __ATOMIC_RELEASE);
    }
  }
}

/* p2p_launch enqueues x on its stream with the runtime's LaunchHostFunc. */
static ncclResult_t p2p_launch(struct p2p_xfer *x) {
  static int (*launch)(void *, void (*)(void *), void *);
  if (!launch) {
    void *h = dlopen(getenv("FAKE_NCCL_RUNTIME"), RTLD_NOW);
#ifdef FAKE_RCCL
    const char *sym = "hipLaunchHostFunc";
#else
    const char *sym = "cudaLaunchHostFunc";
#endif
    if (h) launch = (int (*)(void *, void (*)(void *), void *))dlsym(h, sym);
    if (!launch) return 1; /* ncclUnhandledCudaError */
  }
  return launch(x->stream, p2p_run, x) ? 1 : 0;
}

/* The calling thread's transfers of its open group, launched at its end. */
#define P2P_PENDING 64
static __thread struct p2p_xfer *pending[P2P_PENDING];
static __thread int npending;

static ncclResult_t p2p_op(int send, ncclComm_t c, void *buf, size_t n, int t, int peer, void *stream) {
  if (!p2p_on()) return 0;
  if (!c->seg || elem_size(t) == 0 || peer >= c->nranks) return 4;
  struct p2p_xfer *x = malloc(sizeof *x);
  if (!x) return 2;
  *x = (struct p2p_xfer){send, c, buf, n * elem_size(t), peer, stream};
  if (!group_depth) return p2p_launch(x);
  if (npending == P2P_PENDING) return 5;
  pending[npending++] = x;
  return 0;
}

/* p2p_flush launches the ended group's transfers, sends then receives,
 * unless the group end failed with r; it returns the first failure. */
static ncclResult_t p2p_flush(ncclResult_t r) {
  for (int pass = 1; pass >= 0; pass--)
    for (int i = 0; i < npending; i++)
      if (pending[i]->send == pass && !r) r = p2p_launch(pending[i]);
  npending = 0;
  return r;
}
