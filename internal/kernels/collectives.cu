/* collectives.cu: the device code of capalloc's symmetric heap, one source
 * for CUDA (NVRTC -> collectives.ptx, committed) and HIP (hiprtc at run
 * time), and for the fake runtimes (g++ -DCAPALLOC_HOST, host threads).
 *
 * Every kernel takes one parameter by value (a struct whose layout
 * internal/kernels/args.go mirrors). Nothing in it changes between replays
 * of a graph: the peer table's address and the tensors' offsets are fixed
 * when the collective is recorded, and the epochs live in the signal pads,
 * read and advanced at run time.
 *
 * Rank r's allocation, as mapped in every rank's process, starts with its
 * signal pad (SignalPadBytes), then the heap. The pad, in u32 words:
 *   [0..15]     failure record: status, rank, peer, epoch, block, sig,
 *               peer_epoch, peer_sig, then the cause (what broke the peer,
 *               for a peer-broken failure), then the claim word (first
 *               failure wins, never cleared: the heap is broken for good)
 *   [16..79]    epoch_of[b]: the last epoch block b of this rank finished
 *   [80..1103]  arrive[b][p], u64: epoch | signature << 32 of the last
 *               barrier block b of rank p reached, written by rank p into
 *               this rank's pad (one 64-bit release store), read here
 *               with 64-bit acquire loads: epoch and signature are of one
 *               arrival.
 *   [1104..1111] closed[p]: rank p closed its heap (written by the host)
 *   [1120..1375] signal slots, a 64-byte line each: the count peers add to
 *               (capalloc_signal) and what this rank's waits consumed
 *               (capalloc_wait_signal; written only by this rank).
 *   [1376..1383] verr: capalloc_alltoallv's first counts error since the
 *               host last read it (written only by this rank; cleared by
 *               the host; it does not break the heap).
 * Barriers are per block: block b of every rank meets block b of every
 * other. The kernels map work to blocks by an index that does not depend
 * on the rank, so the bytes block b writes are the bytes block b of the
 * peers reads, and a per-block barrier orders them. */
#include "compat.h"

#define CA_MAX_RANKS 8
#define CA_MAX_BLOCKS 64
#define CA_PAD_BYTES 8192

/* error status values (internal/kernels/args.go) */
#define CA_ERR_TIMEOUT 1u
#define CA_ERR_PEER_BROKEN 2u
#define CA_ERR_LAUNCH 3u
#define CA_ERR_MISMATCH 4u
#define CA_ERR_CLOSED 5u /* a kernel started after rank peer closed its heap */
#define CA_ERR_SIGNAL_TIMEOUT 6u /* a signal wait passed the timeout: peer is the slot */

#define CA_SIGNAL_SLOTS 16

/* A failure: what failed where, this rank's signature and the peer's
 * arrival as last read; c_*: the first failure behind a peer-broken one. */
struct ca_rec {
  u32 status, rank, peer, epoch, block, sig, peer_epoch, peer_sig;
  u32 c_status, c_rank, c_peer, c_epoch, c_peer_epoch, c_sig, c_peer_sig;
};

struct ca_pad {
  /* a ca_rec, word for word, published by its status (ca_fail) */
  u32 status, rank, peer, epoch, block, sig, peer_epoch, peer_sig;
  u32 c_status, c_rank, c_peer, c_epoch, c_peer_epoch, c_sig, c_peer_sig;
  u32 claim;
  u32 epoch_of[CA_MAX_BLOCKS];
  u64 arrive[CA_MAX_BLOCKS][CA_MAX_RANKS];
  /* closed[p]: nonzero once rank p closed its heap, written by the host
   * (DeviceHeap.Close) into every rank's pad; ca_begin stops a kernel that
   * starts after it, before it touches any peer */
  u32 closed[CA_MAX_RANKS];
  u32 align_[8];
  /* signal slot k: a cache line; word 0 the count peers add to, word 1
   * what this rank's waits on it consumed */
  struct {
    u32 count, consumed, line_[14];
  } slot[CA_SIGNAL_SLOTS];
  /* the first counts error of capalloc_alltoallv since the host last read
   * it (status 0: none); written by this rank's block 0 only, read and
   * cleared by the host: the heap is not broken by it */
  struct {
    u32 status, sender, receiver, pad_;
    u64 value, limit;
  } verr;
};
static_assert(sizeof(ca_pad) <= CA_PAD_BYTES, "the signal pad holds struct ca_pad");
#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__) && !defined(__HIPCC_RTC__) && !defined(__HIPCC__)
/* checked by the host build (NVRTC has no offsetof); the layout is the
 * same for every compiler: naturally aligned u32 and u64 */
static_assert(__builtin_offsetof(ca_pad, epoch_of) == 64 && __builtin_offsetof(ca_pad, arrive) == 320 &&
                  __builtin_offsetof(ca_pad, closed) == 4416 && __builtin_offsetof(ca_pad, slot) == 4480 &&
                  sizeof(((ca_pad *)0)->slot[0]) == 64 && __builtin_offsetof(ca_pad, verr) == 5504,
              "args.go mirrors the offsets: PadEpochsOff, PadArrivesOff, PadClosedOff, PadSignalsOff, SignalSlotBytes, PadCountsErrOff");
#endif

/* The kernels' parameter. Offsets are bytes from the start of the heap
 * (after the pad). count: elements of a reduction, bytes of a copy. */
struct ca_coll {
  u64 table;         /* device address of u64[nranks]: each rank's allocation */
  u64 in_off, out_off;
  u64 count;         /* elements (reductions) or bytes (copies) */
  u64 timeout_ticks; /* a wait longer than this fails the heap */
  u32 rank, nranks;
  u32 dtype;
  u32 sig;           /* the collective's signature (args.go Signature) */
};

/* The point-to-point kernels' parameter: c's table, rank, nranks and
 * timeout; a put copies c.count bytes from this rank's heap at c.in_off
 * into peer's at c.out_off; a signal adds value to peer's slot; a wait
 * waits for value more on this rank's slot than its waits consumed. */
struct ca_p2p {
  ca_coll c;
  u32 peer, slot, value, pad_;
};

struct ca_axpy {
  u64 x, y, n;
  float a;
  u32 pad_;
};

enum { CA_F32 = 0, CA_I32 = 1, CA_F16 = 2, CA_BF16 = 3 };

CA_DEV unsigned char *ca_base(const ca_coll &a, u32 p) { return (unsigned char *)ca_ld((const u64 *)a.table + p); }
CA_DEV ca_pad *ca_pad_of(const ca_coll &a, u32 p) { return (ca_pad *)ca_base(a, p); }
CA_DEV unsigned char *ca_heap(const ca_coll &a, u32 p) { return ca_base(a, p) + CA_PAD_BYTES; }

/* ---- failure: the first one is recorded in this rank's pad ----
 * The claim word picks the first; its record is written, then published
 * by a release store of status, so whoever reads status != 0 with an
 * acquire load (a peer, below) reads the whole record. */
CA_DEV void ca_fail(ca_pad *me, const ca_rec &r) {
  if (ca_cas(&me->claim, 0u, 1u) != 0u) return;
  u32 *w = (u32 *)me;
  const u32 *v = (const u32 *)&r;
  for (u32 i = 1; i < sizeof(ca_rec) / 4; i++) ca_st_volatile(&w[i], v[i]);
  ca_fence();
  ca_st_release(&me->status, r.status);
}

/* ca_rec_of is a failure of this rank's barrier: status, the peer and its
 * arrival as last read. */
CA_DEV ca_rec ca_rec_of(const ca_coll &a, u32 status, u32 p, u32 e, u64 got) {
  ca_rec r = {};
  r.status = status;
  r.rank = a.rank;
  r.peer = p;
  r.epoch = e;
  r.block = CA_BID;
  r.sig = a.sig;
  r.peer_epoch = (u32)got;
  r.peer_sig = (u32)(got >> 32);
  return r;
}

/* Per-kernel state of a block: the epoch it is at (every thread keeps the
 * same copy) and the block-shared failure flag. */
struct ca_state {
  u32 ep;
  volatile u32 *failed;
};

/* ca_begin reads the block's epoch and refuses a broken heap or a launch
 * this source cannot serve; every thread calls it. */
CA_DEV bool ca_begin(const ca_coll &a, ca_state &s, volatile u32 *shared) {
  ca_pad *me = ca_pad_of(a, a.rank);
  s.failed = shared;
  if (CA_TID == 0) {
    u32 bad = a.nranks > CA_MAX_RANKS || a.rank >= a.nranks || CA_GDIM > CA_MAX_BLOCKS || CA_BDIM < a.nranks;
    if (bad) {
      ca_rec r = {};
      r.status = CA_ERR_LAUNCH;
      r.rank = a.rank;
      r.peer = a.nranks;
      r.block = CA_BID;
      r.sig = a.sig;
      ca_fail(me, r);
    }
    /* a rank that closed its heap: this kernel started after, so it is a
     * collective that rank never joins (and its memory may be gone) */
    u32 refused = bad;
    for (u32 p = 0; !bad && p < a.nranks; p++) {
      if (ca_ld_acquire(&me->closed[p]) != 0u) {
        ca_rec r = {};
        r.status = CA_ERR_CLOSED;
        r.rank = a.rank;
        r.peer = p;
        r.block = CA_BID;
        r.sig = a.sig;
        ca_fail(me, r);
        refused = 1u;
        break;
      }
    }
    /* refused, not only status: another block may hold the claim and not
     * have published its record yet, and a block that went on would write
     * its arrival into a closed peer's (maybe freed) pad */
    *s.failed = refused || ca_ld_acquire(&me->status) != 0u;
  }
  s.ep = ca_ld_volatile(&me->epoch_of[CA_BID]);
  ca_sync();
  return *s.failed == 0u;
}

/* ca_end stores the block's epoch for the next kernel on this stream. */
CA_DEV void ca_end(const ca_coll &a, ca_state &s) {
  if (CA_TID == 0) ca_st_volatile(&ca_pad_of(a, a.rank)->epoch_of[CA_BID], s.ep);
}

/* ca_barrier: block b of this rank arrives at its next epoch e in every
 * peer's pad, with the collective's signature in the same 64-bit word
 * (release: everything the block wrote before is visible to a peer that
 * sees the arrival), then waits until block b of every peer has arrived
 * there too (acquire). Thread p < nranks serves peer p.
 *
 * What it may read from peer p: p's arrival at e-1 (not there yet), at e,
 * or at e+1: p may pass barrier e as soon as it sees this rank's arrival,
 * and arrive at e+1 before this rank looks; it cannot reach e+2, which
 * needs this rank at e+1. Anything else means the two ranks' epochs
 * diverged (one ran collectives the other did not): a mismatch. At e the
 * signatures must be equal: a mismatch otherwise. At e+1 the signature is
 * p's next collective's and is not compared; but p passed e, which it
 * did only after reading this rank's arrival at exactly e (this rank is
 * not at e+1 yet) and finding the signatures equal. So every mismatch
 * between two ranks is seen by both, at the same epoch: a rank that finds
 * one stops there, so its peer reads its arrival at e, never at e+1.
 *
 * A wait longer than the timeout, a mismatch, or a peer that broke, fails
 * the heap; every thread returns false then. A peer that broke is looked
 * at once more (its arrival is ordered before its failure): a mismatch
 * with this rank is named here too; otherwise the record copies what
 * broke the peer as the cause. */
CA_DEV bool ca_barrier(const ca_coll &a, ca_state &s) {
  ca_sync(); /* the block's writes before the barrier are done */
  u32 e = ++s.ep;
  if (CA_TID < a.nranks) {
    u32 p = CA_TID;
    ca_pad *me = ca_pad_of(a, a.rank);
    ca_pad *peer = ca_pad_of(a, p);
    ca_fence();
    ca_st_release64(&peer->arrive[CA_BID][a.rank], (u64)a.sig << 32 | e);
    u64 start = ca_timer();
    for (;;) {
      u64 got = ca_ld_acquire64(&me->arrive[CA_BID][p]);
      int ahead = (int)((u32)got - e); /* wrap-safe */
      if (ahead == 1 || (ahead == 0 && (u32)(got >> 32) == a.sig)) break;
      if (ahead != -1) {
        ca_fail(me, ca_rec_of(a, CA_ERR_MISMATCH, p, e, got));
        *s.failed = 1u;
        break;
      }
      if (ca_ld_acquire(&peer->status) != 0u) {
        got = ca_ld_acquire64(&me->arrive[CA_BID][p]);
        if ((u32)got == e && (u32)(got >> 32) != a.sig) {
          ca_fail(me, ca_rec_of(a, CA_ERR_MISMATCH, p, e, got));
        } else {
          ca_rec r = ca_rec_of(a, CA_ERR_PEER_BROKEN, p, e, got);
          /* the peer's record, word by word (struct ca_rec's order) */
          const u32 *q = (const u32 *)peer;
          if (ca_ld_volatile(&q[8]) != 0u) { /* its cause */
            r.c_status = ca_ld_volatile(&q[8]), r.c_rank = ca_ld_volatile(&q[9]), r.c_peer = ca_ld_volatile(&q[10]);
            r.c_epoch = ca_ld_volatile(&q[11]), r.c_peer_epoch = ca_ld_volatile(&q[12]);
            r.c_sig = ca_ld_volatile(&q[13]), r.c_peer_sig = ca_ld_volatile(&q[14]);
          } else { /* its own failure */
            r.c_status = ca_ld_volatile(&q[0]), r.c_rank = ca_ld_volatile(&q[1]), r.c_peer = ca_ld_volatile(&q[2]);
            r.c_epoch = ca_ld_volatile(&q[3]), r.c_peer_epoch = ca_ld_volatile(&q[6]);
            r.c_sig = ca_ld_volatile(&q[5]), r.c_peer_sig = ca_ld_volatile(&q[7]);
          }
          ca_fail(me, r);
        }
        *s.failed = 1u;
        break;
      }
      if (ca_ld_acquire(&me->status) != 0u) {
        *s.failed = 1u;
        break;
      }
      if (ca_timer() - start > a.timeout_ticks) {
        ca_fail(me, ca_rec_of(a, CA_ERR_TIMEOUT, p, e, got));
        *s.failed = 1u;
        break;
      }
      ca_pause();
    }
  }
  ca_sync();
  return *s.failed == 0u;
}

/* ---- element types: sums in float (halves) or wrapping int32 ---- */
CA_DEV float ca_h2f(u16 h) {
  u32 s = (u32)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
  if (e == 0) { /* zero or subnormal: m * 2^-24, exact in float */
    bits = s | ca_as_u32((float)m * 5.9604644775390625e-8f);
  } else if (e == 31) {
    bits = s | 0x7f800000u | (m << 13);
  } else {
    bits = s | ((e + 112u) << 23) | (m << 13);
  }
  return ca_as_float(bits);
}
/* round to nearest, ties to even */
CA_DEV u16 ca_f2h(float f) {
  u32 x = ca_as_u32(f), s = (x >> 16) & 0x8000u, m = x & 0x7fffffu;
  int e = (int)((x >> 23) & 0xffu) - 127 + 15;
  if (((x >> 23) & 0xffu) == 0xffu) return (u16)(s | 0x7c00u | (m ? 0x200u : 0u));
  if (e >= 31) return (u16)(s | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (u16)s;
    m |= 0x800000u;
    u32 shift = (u32)(14 - e), hm = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (hm & 1u))) hm++;
    return (u16)(s | hm);
  }
  u32 hm = m >> 13, rem = m & 0x1fffu, h = s | ((u32)e << 10) | hm;
  if (rem > 0x1000u || (rem == 0x1000u && (hm & 1u))) h++;
  return (u16)h;
}
CA_DEV float ca_bf2f(u16 b) { return ca_as_float((u32)b << 16); }
CA_DEV u16 ca_f2bf(float f) {
  u32 x = ca_as_u32(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u); /* NaN stays NaN */
  return (u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* A pack is 16 bytes of elements; the last pack of a tensor may be partial
 * (elems < per pack). Sums run over ranks 0..n-1 in order on every rank,
 * so every rank gets the same bits. */
struct ca_pack {
  u32 w[4];
};

CA_DEV u32 ca_elem_bytes(u32 dt) { return dt == CA_F16 || dt == CA_BF16 ? 2u : 4u; }

/* ca_load and ca_store move nbytes (a whole number of elements) of a pack
 * with the widest access the address allows: one 16-byte vector where p is
 * 16-aligned, else 4-, 2- or 1-byte words, each naturally aligned (a
 * GPU faults on a misaligned one). Tensors may start anywhere the API
 * accepts: a chunk of an odd count of halves starts 2-byte aligned, a
 * hand-written Tensor at any byte. */
CA_DEV void ca_load(ca_pack &v, const unsigned char *p, u32 nbytes) {
  u32 at = (u32)(u64)p;
  if (nbytes == 16u && (at & 15u) == 0u) {
    ca_v4 x = ca_ld((const ca_v4 *)p);
    v.w[0] = x.x;
    v.w[1] = x.y;
    v.w[2] = x.z;
    v.w[3] = x.w;
    return;
  }
  v.w[0] = v.w[1] = v.w[2] = v.w[3] = 0u;
  if (((at | nbytes) & 3u) == 0u) {
    for (u32 i = 0; i < nbytes / 4u; i++) v.w[i] = ca_ld((const u32 *)p + i);
  } else if (((at | nbytes) & 1u) == 0u) {
    for (u32 i = 0; i < nbytes / 2u; i++) ((u16 *)v.w)[i] = ca_ld((const u16 *)p + i);
  } else {
    for (u32 i = 0; i < nbytes; i++) ((unsigned char *)v.w)[i] = ca_ld(p + i);
  }
}
CA_DEV void ca_store(unsigned char *p, const ca_pack &v, u32 nbytes) {
  u32 at = (u32)(u64)p;
  if (nbytes == 16u && (at & 15u) == 0u) {
    ca_v4 x;
    x.x = v.w[0];
    x.y = v.w[1];
    x.z = v.w[2];
    x.w = v.w[3];
    ca_st((ca_v4 *)p, x);
  } else if (((at | nbytes) & 3u) == 0u) {
    for (u32 i = 0; i < nbytes / 4u; i++) ca_st((u32 *)p + i, v.w[i]);
  } else if (((at | nbytes) & 1u) == 0u) {
    for (u32 i = 0; i < nbytes / 2u; i++) ca_st((u16 *)p + i, ((const u16 *)v.w)[i]);
  } else {
    for (u32 i = 0; i < nbytes; i++) ca_st(p + i, ((const unsigned char *)v.w)[i]);
  }
}
/* acc += v, element-wise; acc of halves is kept as 8 floats */
struct ca_acc {
  float f[8];
  u32 i[4];
};
/* ca_half: element k (< 8) of a pack of halves, by shifts: a pack viewed
 * through a u16 pointer would live in local memory on the GPU. */
CA_DEV u16 ca_half(const ca_pack &v, int k) { return (u16)(v.w[k >> 1] >> (16 * (k & 1))); }

/* ca_acc_set starts the sum at v (rank 0's pack), not at +0: -0 + -0 is
 * -0, and +0 + -0 would make it +0. */
CA_DEV void ca_acc_set(ca_acc &c, const ca_pack &v, u32 dt) {
  switch (dt) {
  case CA_F32:
    CA_UNROLLED for (int k = 0; k < 4; k++) c.f[k] = ca_as_float(v.w[k]);
    break;
  case CA_I32:
    CA_UNROLLED for (int k = 0; k < 4; k++) c.i[k] = v.w[k];
    break;
  case CA_F16:
    CA_UNROLLED for (int k = 0; k < 8; k++) c.f[k] = ca_h2f(ca_half(v, k));
    break;
  default:
    CA_UNROLLED for (int k = 0; k < 8; k++) c.f[k] = ca_bf2f(ca_half(v, k));
    break;
  }
}
CA_DEV void ca_acc_add(ca_acc &c, const ca_pack &v, u32 dt) {
  switch (dt) {
  case CA_F32:
    CA_UNROLLED for (int k = 0; k < 4; k++) c.f[k] += ca_as_float(v.w[k]);
    break;
  case CA_I32:
    CA_UNROLLED for (int k = 0; k < 4; k++) c.i[k] += v.w[k];
    break;
  case CA_F16:
    CA_UNROLLED for (int k = 0; k < 8; k++) c.f[k] += ca_h2f(ca_half(v, k));
    break;
  default:
    CA_UNROLLED for (int k = 0; k < 8; k++) c.f[k] += ca_bf2f(ca_half(v, k));
    break;
  }
}
CA_DEV void ca_acc_out(ca_pack &v, const ca_acc &c, u32 dt) {
  switch (dt) {
  case CA_F32:
    CA_UNROLLED for (int k = 0; k < 4; k++) v.w[k] = ca_as_u32(c.f[k]);
    break;
  case CA_I32:
    CA_UNROLLED for (int k = 0; k < 4; k++) v.w[k] = c.i[k];
    break;
  case CA_F16:
    CA_UNROLLED for (int k = 0; k < 4; k++) v.w[k] = (u32)ca_f2h(c.f[2 * k]) | (u32)ca_f2h(c.f[2 * k + 1]) << 16;
    break;
  default:
    CA_UNROLLED for (int k = 0; k < 4; k++) v.w[k] = (u32)ca_f2bf(c.f[2 * k]) | (u32)ca_f2bf(c.f[2 * k + 1]) << 16;
    break;
  }
}

/* ca_sum_pack sums pack j (byte offset j*16 of the tensor at off) over
 * every rank into v, starting from rank 0's pack. */
CA_DEV void ca_sum_pack(const ca_coll &a, u64 off, u64 j, u64 nbytes, ca_pack &v) {
  u64 at = j * 16u;
  u32 len = nbytes - at < 16u ? (u32)(nbytes - at) : 16u;
  ca_acc c;
  for (u32 p = 0; p < a.nranks; p++) {
    ca_pack x;
    ca_load(x, ca_heap(a, p) + off + at, len);
    if (p == 0)
      ca_acc_set(c, x, a.dtype);
    else
      ca_acc_add(c, x, a.dtype);
  }
  ca_acc_out(v, c, a.dtype);
}

/* ---- kernels ---- */

/* capalloc_barrier: every rank's block b meets every other's. */
CA_KERNEL capalloc_barrier(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
  }
  ca_end(a, s);
}

/* capalloc_allreduce_oneshot: in place, t (in_off, count elements) becomes
 * the sum over ranks on every rank. Each round, a block's threads load
 * their packs from every rank and sum them in registers, meet the peers'
 * same block (everyone has read those packs), then store: one barrier to
 * start (every input written) and one per round. */
CA_KERNEL capalloc_allreduce_oneshot(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    u64 nbytes = a.count * ca_elem_bytes(a.dtype), packs = (nbytes + 15u) / 16u;
    u64 stride = (u64)CA_GDIM * CA_BDIM, rounds = (packs + stride - 1u) / stride;
    for (u64 r = 0; r < rounds; r++) {
      u64 j = r * stride + (u64)CA_BID * CA_BDIM + CA_TID;
      ca_pack v;
      if (j < packs) ca_sum_pack(a, a.in_off, j, nbytes, v);
      if (!ca_barrier(a, s)) break;
      if (j < packs) {
        u64 at = j * 16u;
        ca_store(ca_heap(a, a.rank) + a.in_off + at, v, nbytes - at < 16u ? (u32)(nbytes - at) : 16u);
      }
    }
  }
  ca_end(a, s);
}

/* capalloc_allreduce_twoshot: in place, a reduce-scatter then an
 * all-gather. Rank q owns packs [q*part, (q+1)*part). Phase 1: rank r sums
 * its part over every rank into its own copy. Barrier. Phase 2: rank r
 * copies every other part from its owner. Barrier, so no rank rewrites its
 * part while a peer still copies it. Pack q*part+i is handled by the block
 * that owns index i on every rank, in both phases. */
CA_KERNEL capalloc_allreduce_twoshot(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    u64 nbytes = a.count * ca_elem_bytes(a.dtype), packs = (nbytes + 15u) / 16u;
    u64 part = (packs + a.nranks - 1u) / a.nranks, stride = (u64)CA_GDIM * CA_BDIM;
    u64 first = (u64)CA_BID * CA_BDIM + CA_TID;
    unsigned char *mine = ca_heap(a, a.rank) + a.in_off;
    for (u64 i = first; i < part; i += stride) {
      u64 j = (u64)a.rank * part + i;
      if (j >= packs) break;
      ca_pack v;
      ca_sum_pack(a, a.in_off, j, nbytes, v);
      u64 at = j * 16u;
      ca_store(mine + at, v, nbytes - at < 16u ? (u32)(nbytes - at) : 16u);
    }
    if (ca_barrier(a, s)) {
      for (u32 q = 0; q < a.nranks; q++) {
        if (q == a.rank) continue;
        const unsigned char *theirs = ca_heap(a, q) + a.in_off;
        for (u64 i = first; i < part; i += stride) {
          u64 j = (u64)q * part + i;
          if (j >= packs) break;
          u64 at = j * 16u;
          u32 len = nbytes - at < 16u ? (u32)(nbytes - at) : 16u;
          ca_pack v;
          ca_load(v, theirs + at, len);
          ca_store(mine + at, v, len);
        }
      }
      ca_barrier(a, s);
    }
  }
  ca_end(a, s);
}

/* ca_copy copies n bytes, spread over every thread of the grid, in the
 * widest naturally aligned accesses both ends allow: 16-byte vectors, else
 * 4-byte words, else bytes; the tail that does not fill one goes by bytes. */
CA_DEV void ca_copy(unsigned char *dst, const unsigned char *src, u64 n) {
  u64 stride = (u64)CA_GDIM * CA_BDIM, first = (u64)CA_BID * CA_BDIM + CA_TID;
  u64 al = (u64)dst | (u64)src, done = 0;
  if ((al & 15u) == 0u) {
    u64 packs = n / 16u;
    for (u64 j = first; j < packs; j += stride) ca_st((ca_v4 *)dst + j, ca_ld((const ca_v4 *)src + j));
    done = packs * 16u;
  } else if ((al & 3u) == 0u) {
    u64 words = n / 4u;
    for (u64 j = first; j < words; j += stride) ca_st((u32 *)dst + j, ca_ld((const u32 *)src + j));
    done = words * 4u;
  }
  for (u64 k = done + first; k < n; k += stride) ca_st(dst + k, ca_ld(src + k));
}

/* capalloc_allgather: out's p-th chunk (count bytes) is rank p's in. */
CA_KERNEL capalloc_allgather(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    unsigned char *out = ca_heap(a, a.rank) + a.out_off;
    for (u32 p = 0; p < a.nranks; p++) ca_copy(out + (u64)p * a.count, ca_heap(a, p) + a.in_off, a.count);
    ca_barrier(a, s); /* no rank rewrites its in while a peer reads it */
  }
  ca_end(a, s);
}

/* capalloc_alltoall: out's p-th chunk (count bytes) is rank p's in's r-th. */
CA_KERNEL capalloc_alltoall(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    unsigned char *out = ca_heap(a, a.rank) + a.out_off;
    for (u32 p = 0; p < a.nranks; p++)
      ca_copy(out + (u64)p * a.count, ca_heap(a, p) + a.in_off + (u64)a.rank * a.count, a.count);
    ca_barrier(a, s);
  }
  ca_end(a, s);
}

/* capalloc_reducescatter: out (count elements) is the sum over ranks of
 * their in's r-th chunk of count elements. */
CA_KERNEL capalloc_reducescatter(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    u64 nbytes = a.count * ca_elem_bytes(a.dtype), packs = (nbytes + 15u) / 16u;
    u64 stride = (u64)CA_GDIM * CA_BDIM, chunk = a.in_off + (u64)a.rank * nbytes;
    unsigned char *out = ca_heap(a, a.rank) + a.out_off;
    for (u64 j = (u64)CA_BID * CA_BDIM + CA_TID; j < packs; j += stride) {
      ca_pack v;
      ca_sum_pack(a, chunk, j, nbytes, v);
      u64 at = j * 16u;
      ca_store(out + at, v, nbytes - at < 16u ? (u32)(nbytes - at) : 16u);
    }
    ca_barrier(a, s);
  }
  ca_end(a, s);
}

/* ---- point-to-point: put, signal, wait ----
 * None of them meets a barrier, so ranks may run different numbers of
 * them; each refuses a broken heap or a closed peer at ca_begin, before it
 * touches any peer, and keeps the block's epoch as it was. */

/* ca_p2p_ok: the peer and slot are ones the source serves. */
CA_DEV bool ca_p2p_ok(const ca_p2p &p, ca_state &s) {
  if (CA_TID == 0 && (p.peer >= p.c.nranks || p.slot >= CA_SIGNAL_SLOTS)) {
    ca_rec r = {};
    r.status = CA_ERR_LAUNCH;
    r.rank = p.c.rank;
    r.peer = p.c.nranks;
    r.block = CA_BID;
    ca_fail(ca_pad_of(p.c, p.c.rank), r);
    *s.failed = 1u;
  }
  ca_sync();
  return *s.failed == 0u;
}

/* capalloc_put: this rank's in_off..+count into peer's heap at out_off,
 * spread over the grid. Stream order publishes it: the signal queued
 * after it runs once every block's stores are done. */
CA_KERNEL capalloc_put(ca_p2p p) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(p.c, s, sh) && ca_p2p_ok(p, s))
    ca_copy(ca_heap(p.c, p.peer) + p.c.out_off, ca_heap(p.c, p.c.rank) + p.c.in_off, p.c.count);
  ca_end(p.c, s);
}

/* capalloc_signal: adds value to peer's slot, one thread, after a
 * system-scope fence: the puts before it are visible to a wait that sees
 * the count. */
CA_KERNEL capalloc_signal(ca_p2p p) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(p.c, s, sh) && ca_p2p_ok(p, s) && CA_TID == 0) {
    ca_fence();
    ca_add_release(&ca_pad_of(p.c, p.peer)->slot[p.slot].count, p.value);
  }
  ca_end(p.c, s);
}

/* capalloc_wait_signal: waits until this rank's slot count is value past
 * what the waits before consumed (wrap-safe), then consumes it; past the
 * timeout it records CA_ERR_SIGNAL_TIMEOUT (peer: the slot; epoch: the
 * count wanted; peer_epoch: the count seen) and gives up. */
CA_KERNEL capalloc_wait_signal(ca_p2p p) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(p.c, s, sh) && ca_p2p_ok(p, s) && CA_TID == 0) {
    ca_pad *me = ca_pad_of(p.c, p.c.rank);
    u32 want = ca_ld_volatile(&me->slot[p.slot].consumed) + p.value;
    u64 start = ca_timer();
    for (;;) {
      u32 got = ca_ld_acquire(&me->slot[p.slot].count);
      if ((int)(got - want) >= 0) {
        ca_st_volatile(&me->slot[p.slot].consumed, want);
        break;
      }
      if (ca_ld_acquire(&me->status) != 0u) break;
      u32 q = 0;
      while (q < p.c.nranks && ca_ld_acquire(&me->closed[q]) == 0u) q++;
      if (q < p.c.nranks) { /* a rank closed its heap: it signals no more */
        ca_rec r = {};
        r.status = CA_ERR_CLOSED;
        r.rank = p.c.rank;
        r.peer = q;
        r.block = CA_BID;
        ca_fail(me, r);
        break;
      }
      if (ca_timer() - start > p.c.timeout_ticks) {
        ca_rec r = {};
        r.status = CA_ERR_SIGNAL_TIMEOUT;
        r.rank = p.c.rank;
        r.peer = p.slot;
        r.epoch = want;
        r.block = CA_BID;
        r.peer_epoch = got;
        ca_fail(me, r);
        break;
      }
      ca_pause();
    }
  }
  ca_end(p.c, s);
}

/* ---- the aligned variants ----
 * Where every operand starts 16-aligned and every tensor and chunk a
 * collective addresses is a whole number of 16-byte packs, packs move as
 * 16-byte vectors only,
 * several in flight per thread (CA_UNROLL for copies, CA_RUNROLL for
 * sums: every load of a round is issued before any is used), indexed in
 * 32 bits (the host sends at most 2^32 - 1 packs a rank here). The
 * element type is a template parameter, so a sum's inner loop has no
 * switch. The host picks these by the operands
 * (symheap/devcollectives.go); the general kernels above serve every
 * other layout. A vector access at an address that is not 16-aligned
 * faults (the fakes' ca_check too): the choice must be the host's.
 *
 * Work mapping: round k of thread t of block b covers packs
 * k*U*stride + u*stride + b*CA_BDIM + t (u < U), the same on every rank,
 * so block b's barrier orders what block b of the peers reads and writes,
 * as in the general kernels. */
#define CA_UNROLL 4
#define CA_RUNROLL 1

/* CA_BY_DTYPE calls fn<element type> with args, for dt's type. */
#define CA_BY_DTYPE(dt, fn, args)       \
  switch (dt) {                         \
  case CA_F32: fn<CA_F32> args; break;  \
  case CA_I32: fn<CA_I32> args; break;  \
  case CA_F16: fn<CA_F16> args; break;  \
  default: fn<CA_BF16> args; break;     \
  }

CA_DEV void ca_vld(ca_pack &v, const unsigned char *p, u32 j) {
  ca_v4 x = ca_ld((const ca_v4 *)p + j);
  v.w[0] = x.x, v.w[1] = x.y, v.w[2] = x.z, v.w[3] = x.w;
}
CA_DEV void ca_vst(unsigned char *p, u32 j, const ca_pack &v) {
  ca_v4 x;
  x.x = v.w[0], x.y = v.w[1], x.z = v.w[2], x.w = v.w[3];
  ca_st((ca_v4 *)p + j, x);
}

/* ca_vsum: v[u] is whole pack j0 + u*stride (those below full) of the
 * tensor at off, summed over every rank, rank 0 first. The packs of two
 * ranks are loaded before they are added: 2*CA_RUNROLL loads in flight. */
template <u32 DT> CA_DEV void ca_vsum(const ca_coll &a, u64 off, u32 j0, u32 stride, u32 full, ca_pack (&v)[CA_RUNROLL]) {
  ca_acc c[CA_RUNROLL];
  for (u32 p = 0; p < a.nranks; p += 2u) {
    const unsigned char *s0 = ca_heap(a, p) + off, *s1 = p + 1u < a.nranks ? ca_heap(a, p + 1u) + off : s0;
    ca_pack x[CA_RUNROLL];
    CA_UNROLLED for (u32 u = 0; u < CA_RUNROLL; u++) {
      bool in = j0 + u * stride < full;
      if (in) ca_vld(v[u], s0, j0 + u * stride);
      if (in && p + 1u < a.nranks) ca_vld(x[u], s1, j0 + u * stride);
    }
    CA_UNROLLED for (u32 u = 0; u < CA_RUNROLL; u++) {
      if (j0 + u * stride >= full) continue;
      if (p == 0)
        ca_acc_set(c[u], v[u], DT);
      else
        ca_acc_add(c[u], v[u], DT);
      if (p + 1u < a.nranks) ca_acc_add(c[u], x[u], DT);
    }
  }
  CA_UNROLLED for (u32 u = 0; u < CA_RUNROLL; u++)
    if (j0 + u * stride < full) ca_acc_out(v[u], c[u], DT);
}

/* ca_vcopy copies whole packs [lo, hi) of src into dst. */
CA_DEV void ca_vcopy(unsigned char *dst, const unsigned char *src, u32 lo, u32 hi) {
  u32 stride = CA_GDIM * CA_BDIM, first = CA_BID * CA_BDIM + CA_TID;
  for (u32 base = lo; base < hi; base += stride * CA_UNROLL) {
    ca_pack v[CA_UNROLL];
    CA_UNROLLED for (u32 u = 0; u < CA_UNROLL; u++)
      if (base + first + u * stride < hi) ca_vld(v[u], src, base + first + u * stride);
    CA_UNROLLED for (u32 u = 0; u < CA_UNROLL; u++)
      if (base + first + u * stride < hi) ca_vst(dst, base + first + u * stride, v[u]);
  }
}

template <u32 DT> CA_DEV void ca_oneshot_aligned(const ca_coll &a, ca_state &s) {
  u32 full = (u32)(a.count * ca_elem_bytes(DT) / 16u), stride = CA_GDIM * CA_BDIM, first = CA_BID * CA_BDIM + CA_TID;
  for (u32 base = 0; base < full; base += stride * CA_RUNROLL) {
    ca_pack v[CA_RUNROLL];
    ca_vsum<DT>(a, a.in_off, base + first, stride, full, v);
    if (!ca_barrier(a, s)) return; /* every rank has read these packs */
    unsigned char *mine = ca_heap(a, a.rank) + a.in_off;
    CA_UNROLLED for (u32 u = 0; u < CA_RUNROLL; u++)
      if (base + first + u * stride < full) ca_vst(mine, base + first + u * stride, v[u]);
  }
}

/* capalloc_allreduce_oneshot_aligned: capalloc_allreduce_oneshot for a
 * 16-aligned tensor: one barrier to start and one per round. */
CA_KERNEL_ALIGNED capalloc_allreduce_oneshot_aligned(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    CA_BY_DTYPE(a.dtype, ca_oneshot_aligned, (a, s));
  }
  ca_end(a, s);
}

template <u32 DT> CA_DEV void ca_twoshot_aligned(const ca_coll &a, ca_state &s) {
  u32 full = (u32)(a.count * ca_elem_bytes(DT) / 16u), part = (full + a.nranks - 1u) / a.nranks;
  u32 stride = CA_GDIM * CA_BDIM, first = CA_BID * CA_BDIM + CA_TID;
  u32 lo = a.rank * part, hi = lo + part < full ? lo + part : full;
  for (u32 base = lo; base < hi; base += stride * CA_RUNROLL) {
    ca_pack v[CA_RUNROLL];
    ca_vsum<DT>(a, a.in_off, base + first, stride, hi, v);
    unsigned char *mine = ca_heap(a, a.rank) + a.in_off;
    CA_UNROLLED for (u32 u = 0; u < CA_RUNROLL; u++)
      if (base + first + u * stride < hi) ca_vst(mine, base + first + u * stride, v[u]);
  }
  if (!ca_barrier(a, s)) return;
  for (u32 q = 0; q < a.nranks; q++) {
    if (q == a.rank) continue;
    u32 qlo = q * part, qhi = qlo + part < full ? qlo + part : full;
    ca_vcopy(ca_heap(a, a.rank) + a.in_off, ca_heap(a, q) + a.in_off, qlo, qhi);
  }
  ca_barrier(a, s);
}

/* capalloc_allreduce_twoshot_aligned: capalloc_allreduce_twoshot for a
 * 16-aligned tensor. Rank q owns packs [q*part, (q+1)*part); whole pack
 * q*part + i is handled by the same block and thread in both phases. */
CA_KERNEL_ALIGNED capalloc_allreduce_twoshot_aligned(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    CA_BY_DTYPE(a.dtype, ca_twoshot_aligned, (a, s));
  }
  ca_end(a, s);
}

/* capalloc_allgather_aligned: capalloc_allgather where in, out and count
 * are 16-aligned. */
CA_KERNEL_ALIGNED capalloc_allgather_aligned(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    unsigned char *out = ca_heap(a, a.rank) + a.out_off;
    for (u32 p = 0; p < a.nranks; p++) ca_vcopy(out + (u64)p * a.count, ca_heap(a, p) + a.in_off, 0, (u32)(a.count / 16u));
    ca_barrier(a, s);
  }
  ca_end(a, s);
}

/* capalloc_alltoall_aligned: capalloc_alltoall where in, out and count
 * are 16-aligned. */
CA_KERNEL_ALIGNED capalloc_alltoall_aligned(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    unsigned char *out = ca_heap(a, a.rank) + a.out_off;
    for (u32 p = 0; p < a.nranks; p++)
      ca_vcopy(out + (u64)p * a.count, ca_heap(a, p) + a.in_off + (u64)a.rank * a.count, 0, (u32)(a.count / 16u));
    ca_barrier(a, s);
  }
  ca_end(a, s);
}

template <u32 DT> CA_DEV void ca_reducescatter_aligned(const ca_coll &a) {
  u64 nbytes = a.count * ca_elem_bytes(DT);
  u32 full = (u32)(nbytes / 16u), stride = CA_GDIM * CA_BDIM, first = CA_BID * CA_BDIM + CA_TID;
  u64 chunk = a.in_off + (u64)a.rank * nbytes;
  unsigned char *out = ca_heap(a, a.rank) + a.out_off;
  for (u32 base = 0; base < full; base += stride * CA_RUNROLL) {
    ca_pack v[CA_RUNROLL];
    ca_vsum<DT>(a, chunk, base + first, stride, full, v);
    CA_UNROLLED for (u32 u = 0; u < CA_RUNROLL; u++)
      if (base + first + u * stride < full) ca_vst(out, base + first + u * stride, v[u]);
  }
}

/* capalloc_reducescatter_aligned: capalloc_reducescatter where in, out
 * and the chunk (count elements, a whole number of packs) are 16-aligned. */
CA_KERNEL_ALIGNED capalloc_reducescatter_aligned(ca_coll a) {
  CA_SHARED(u32, sh, 1);
  ca_state s;
  if (ca_begin(a, s, sh) && ca_barrier(a, s)) {
    CA_BY_DTYPE(a.dtype, ca_reducescatter_aligned, (a));
    ca_barrier(a, s);
  }
  ca_end(a, s);
}

/* ---- all-to-all with counts on the device ----
 * capalloc_alltoallv reads every rank's send counts from the heaps at run
 * time, so one recorded launch serves every routing. Rank p's counts are
 * nranks int64 at send_off of its heap: counts[q] elements go to rank q,
 * from p's in at the prefix sum counts[0..q) (elements); rank r's out
 * receives rank p's elements at the prefix sum over q < p of what rank q
 * sends r, and recv_off gets nranks int64: recv[p], what p sent. Every
 * block of every rank reads the same nranks x nranks counts after the
 * first barrier (peers write theirs before they arrive, and change them
 * only after the last barrier) and checks all of them the same way, so
 * every rank reaches the same verdict with no further exchange: a
 * negative count, a rank's sends past its in (c.count bytes), or a rank's
 * receives past its out (out_bytes) makes every rank skip the copies and
 * the receive counts (nothing written) and record the first bad count, in
 * rank order, in its pad's verr; the last barrier still runs, so the
 * epochs stay in step and the heap stays usable. */
struct ca_a2av {
  ca_coll c;               /* c.in_off, c.out_off; c.count: in's bytes; c.dtype */
  u64 out_bytes;           /* out's bytes */
  u64 send_off, recv_off;  /* the counts: nranks int64 each, 8-aligned */
};
#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__) && !defined(__HIPCC_RTC__) && !defined(__HIPCC__)
/* the kernels' parameters as args.go encodes them (CollSize, P2PSize,
 * AllToAllVSize, AxpySize and each field's offset), checked by the host
 * build; the committed PTX declares the same sizes (compile_test.go) */
static_assert(sizeof(ca_coll) == 56 && __builtin_offsetof(ca_coll, timeout_ticks) == 32 &&
                  __builtin_offsetof(ca_coll, rank) == 40 && __builtin_offsetof(ca_coll, nranks) == 44 &&
                  __builtin_offsetof(ca_coll, dtype) == 48 && __builtin_offsetof(ca_coll, sig) == 52,
              "args.go's Coll mirrors struct ca_coll");
static_assert(sizeof(ca_p2p) == 72 && __builtin_offsetof(ca_p2p, peer) == 56 && __builtin_offsetof(ca_p2p, slot) == 60 &&
                  __builtin_offsetof(ca_p2p, value) == 64,
              "args.go's P2P mirrors struct ca_p2p");
static_assert(sizeof(ca_a2av) == 80 && __builtin_offsetof(ca_a2av, out_bytes) == 56 &&
                  __builtin_offsetof(ca_a2av, send_off) == 64 && __builtin_offsetof(ca_a2av, recv_off) == 72,
              "alltoallv.go's AllToAllVArgs mirrors struct ca_a2av");
static_assert(sizeof(ca_axpy) == 32 && __builtin_offsetof(ca_axpy, n) == 16 && __builtin_offsetof(ca_axpy, a) == 24,
              "args.go's AxpyArgs mirrors struct ca_axpy");
#endif

#define CA_COUNTS_NEGATIVE 1u   /* a count below zero */
#define CA_COUNTS_PAST_SEND 2u  /* a rank's sends past its in */
#define CA_COUNTS_PAST_RECV 3u  /* a rank's receives past its out */

/* ca_counts_check: 0 when counts m (m[p*n+q]: p sends q) fit every rank's
 * in (in_elems) and out (out_elems); else the first bad count's status,
 * sender, receiver, value (the count) and limit (the room its rank's in
 * or out had left for it). Compared with the room left, never summed past
 * it, so nothing overflows. */
CA_DEV u32 ca_counts_check(const u64 *m, u32 n, u64 in_elems, u64 out_elems, u32 &sender, u32 &receiver, u64 &value, u64 &limit) {
  for (u32 p = 0; p < n; p++) {
    u64 sum = 0;
    for (u32 q = 0; q < n; q++) {
      u64 c = m[p * n + q];
      sender = p, receiver = q, value = c, limit = in_elems - sum;
      if ((long long)c < 0) return CA_COUNTS_NEGATIVE;
      if (c > in_elems - sum) return CA_COUNTS_PAST_SEND;
      sum += c;
    }
  }
  for (u32 r = 0; r < n; r++) {
    u64 sum = 0;
    for (u32 p = 0; p < n; p++) {
      u64 c = m[p * n + r];
      sender = p, receiver = r, value = c, limit = out_elems - sum;
      if (c > out_elems - sum) return CA_COUNTS_PAST_RECV;
      sum += c;
    }
  }
  return 0u;
}

CA_KERNEL capalloc_alltoallv(ca_a2av v) {
  /* sh[0]: the failure flag; sh[1..]: the counts, m[p*n+q] */
  CA_SHARED(u64, sh, 1 + CA_MAX_RANKS * CA_MAX_RANKS);
  const ca_coll &a = v.c;
  ca_state s;
  if (ca_begin(a, s, (volatile u32 *)sh) && ca_barrier(a, s)) {
    u64 *m = sh + 1;
    u32 n = a.nranks;
    for (u32 i = CA_TID; i < n * n; i += CA_BDIM) m[i] = ca_ld((const u64 *)(ca_heap(a, i / n) + v.send_off) + i % n);
    ca_sync();
    u64 es = ca_elem_bytes(a.dtype);
    u32 sender, receiver;
    u64 value, limit;
    u32 bad = ca_counts_check(m, n, a.count / es, v.out_bytes / es, sender, receiver, value, limit);
    if (bad == 0u) {
      unsigned char *out = ca_heap(a, a.rank) + a.out_off;
      u64 at = 0;
      for (u32 p = 0; p < n; p++) {
        u64 from = 0;
        for (u32 q = 0; q < a.rank; q++) from += m[p * n + q];
        u64 c = m[p * n + a.rank];
        ca_copy(out + at * es, ca_heap(a, p) + a.in_off + from * es, c * es);
        at += c;
      }
      if (CA_BID == 0 && CA_TID < n) ca_st((u64 *)(ca_heap(a, a.rank) + v.recv_off) + CA_TID, m[CA_TID * n + a.rank]);
    } else if (CA_BID == 0 && CA_TID == 0) {
      ca_pad *me = ca_pad_of(a, a.rank);
      if (ca_ld_volatile(&me->verr.status) == 0u) {
        ca_st_volatile(&me->verr.sender, sender);
        ca_st_volatile(&me->verr.receiver, receiver);
        ca_st(&me->verr.value, value);
        ca_st(&me->verr.limit, limit);
        ca_fence();
        ca_st_volatile(&me->verr.status, bad);
      }
    }
    ca_barrier(a, s); /* no rank rewrites its in or its counts while a peer reads them */
  }
  ca_end(a, s);
}

/* capalloc_axpy: y = a*x + y over n float32, the examples' local work.
 * x and y may start at any byte (a hand-written Tensor): a float that is
 * not 4-aligned moves in narrower words (ca_load). */
CA_DEV float ca_ld_f32(const float *p) {
  if (((u64)p & 3u) == 0u) return ca_ld(p);
  ca_pack v;
  ca_load(v, (const unsigned char *)p, 4u);
  return ca_as_float(v.w[0]);
}
CA_DEV void ca_st_f32(float *p, float f) {
  if (((u64)p & 3u) == 0u) {
    ca_st(p, f);
    return;
  }
  ca_pack v;
  v.w[0] = ca_as_u32(f);
  ca_store((unsigned char *)p, v, 4u);
}
CA_KERNEL capalloc_axpy(ca_axpy k) {
  float *x = (float *)k.x, *y = (float *)k.y;
  u64 stride = (u64)CA_GDIM * CA_BDIM;
  for (u64 i = (u64)CA_BID * CA_BDIM + CA_TID; i < k.n; i += stride) ca_st_f32(&y[i], k.a * ca_ld_f32(&x[i]) + ca_ld_f32(&y[i]));
}

#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__) && !defined(__HIPCC_RTC__) && !defined(__HIPCC__)
/* ---- the host executor the fake runtimes link (CAPALLOC_HOST) ----
 * capalloc_host_kernel finds a kernel by name (-1: none);
 * capalloc_host_launch runs it (compat.h's host section is the GPU model:
 * a pool of workers, one per running block, the block's threads fibers on
 * it, every access checked; a worker idle for CA_IDLE_SECONDS ends):
 *
 *   int capalloc_host_launch(int k, u32 grid, u32 block, const void *params,
 *                            const ca_host_env *env);
 *
 * returns 0 when every thread is done; -1 when no worker could be made
 * (nothing ran); -2 for a configuration it cannot run; > 0, the runtime's
 * code of the launch's first fault (env->misaligned_code, or what
 * env->access returned). Residency, as a GPU's block scheduler: one pool
 * of units per device, shared by every launch on it; each multiprocessor
 * is 840 units (divisible by 1..8, 10, 12, 14, 15...), a block of this
 * launch costs ceil(840 / blocks_per_sm); a block waits for its units
 * before any of its threads start, and returns them when its last thread
 * ends; launches are admitted in the order they ask, each launch's
 * blocks in order (block 0 first) and with no other launch's block
 * between them, as a GPU dispatches one grid's blocks before the next
 * grid's (ca_reserve). A grid that cannot be co-resident with its peers'
 * therefore waits as on a GPU, and its barrier times out. */
#include <sys/mman.h>
#include <stdio.h>
#include <vector>
struct ca_entry {
  const char *name;
  void (*run)(const void *);
  unsigned long size;
};
#define CA_ENTRY(k, T) {#k, [](const void *p) { k(*(const T *)p); }, sizeof(T)}
static const ca_entry ca_entries[] = {
    CA_ENTRY(capalloc_barrier, ca_coll),           CA_ENTRY(capalloc_allreduce_oneshot, ca_coll),
    CA_ENTRY(capalloc_allreduce_twoshot, ca_coll), CA_ENTRY(capalloc_allgather, ca_coll),
    CA_ENTRY(capalloc_alltoall, ca_coll),          CA_ENTRY(capalloc_reducescatter, ca_coll),
    CA_ENTRY(capalloc_put, ca_p2p),                CA_ENTRY(capalloc_signal, ca_p2p),
    CA_ENTRY(capalloc_wait_signal, ca_p2p),        CA_ENTRY(capalloc_axpy, ca_axpy),
    /* the aligned variants */
    CA_ENTRY(capalloc_allreduce_oneshot_aligned, ca_coll), CA_ENTRY(capalloc_allreduce_twoshot_aligned, ca_coll),
    CA_ENTRY(capalloc_allgather_aligned, ca_coll),         CA_ENTRY(capalloc_alltoall_aligned, ca_coll),
    CA_ENTRY(capalloc_reducescatter_aligned, ca_coll),
    CA_ENTRY(capalloc_alltoallv, ca_a2av),
};

extern "C" int capalloc_host_kernel(const char *name) {
  for (unsigned i = 0; i < sizeof ca_entries / sizeof ca_entries[0]; i++)
    if (strcmp(ca_entries[i].name, name) == 0) return (int)i;
  return -1;
}

extern "C" unsigned long capalloc_host_param_size(int k) {
  return k < 0 || k >= (int)(sizeof ca_entries / sizeof ca_entries[0]) ? 0 : ca_entries[k].size;
}

/* ---- residency: units per device ---- */
#define CA_SM_UNITS 840u
#define CA_RES_DEVICES 64
struct ca_res {
  unsigned long long used, next, serving; /* units held; FIFO tickets */
};
static pthread_mutex_t ca_res_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ca_res_cv = PTHREAD_COND_INITIALIZER;
static ca_res ca_res_of[CA_RES_DEVICES];

/* ca_limited reports whether launches under e are admitted by residency. */
static bool ca_limited(const ca_host_env *e) {
  return e && e->sms && e->blocks_per_sm && e->device >= 0 && e->device < CA_RES_DEVICES;
}
/* ca_reserve takes grid consecutive tickets on the launch's device, the
 * first returned: a launch's blocks are admitted one after another, no
 * other launch's block between them, as a GPU's block scheduler
 * dispatches a grid before the next one's blocks. */
static unsigned long long ca_reserve(const ca_host_env *e, u32 grid) {
  if (!ca_limited(e)) return 0;
  pthread_mutex_lock(&ca_res_mu);
  unsigned long long first = ca_res_of[e->device].next;
  ca_res_of[e->device].next += grid;
  pthread_mutex_unlock(&ca_res_mu);
  return first;
}
/* ca_admit waits until it is ticket's turn and block b fits on its
 * device, and takes its units. */
static void ca_admit(ca_block *b, unsigned long long ticket) {
  const ca_host_env *e = b->l->env;
  b->cost = 0;
  if (!ca_limited(e)) return;
  unsigned cost = (CA_SM_UNITS + e->blocks_per_sm - 1) / e->blocks_per_sm;
  unsigned long long cap = (unsigned long long)e->sms * CA_SM_UNITS;
  ca_res *r = &ca_res_of[e->device];
  pthread_mutex_lock(&ca_res_mu);
  while (r->serving != ticket || r->used + cost > cap) pthread_cond_wait(&ca_res_cv, &ca_res_mu);
  r->used += cost;
  r->serving++;
  pthread_cond_broadcast(&ca_res_cv);
  pthread_mutex_unlock(&ca_res_mu);
  b->cost = cost;
}
static void ca_leave(ca_block *b) {
  if (!b->cost) return;
  pthread_mutex_lock(&ca_res_mu);
  ca_res_of[b->l->env->device].used -= b->cost;
  pthread_cond_broadcast(&ca_res_cv);
  pthread_mutex_unlock(&ca_res_mu);
}

/* ---- the worker pool ---- */
/* Each fiber's stack is CA_FIBER_STACK bytes of its worker's one mapping,
 * the lowest CA_RED_ZONE of them below the stack proper: they stay as
 * mmap made them (zero) unless the fiber overflows its stack, which the
 * end of its block finds (ca_check_red_zones) and aborts on, as a guard
 * page would fault. No guard page per fiber: each costs two memory
 * mappings, and a process's (vm.max_map_count, 65530 by default) must
 * hold full-grid launches on several devices with both fakes' workers
 * alive, and the race detector's own mappings. */
#define CA_FIBER_STACK (128u << 10)
#define CA_RED_ZONE 4096u
struct ca_worker {
  pthread_t id;
  pthread_cond_t cv;
  ca_block *job;
  bool taken; /* by a launch, which will give it a job */
  ca_worker *next;
  unsigned char *stacks; /* nthreads fiber stacks, one mapping */
  ca_thread *threads;
  u32 nthreads;
};
static pthread_mutex_t ca_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static ca_worker *ca_idle;

static void ca_fiber_main() {
  ca_thread *me = ca_self;
  ca_block *b = me->blk;
  try {
    b->l->fn(b->l->params);
  } catch (ca_unwind &) {
  }
  me = ca_self;
  me->state = CA_DONE;
  b->live--;
  if (b->arrived != 0 && b->arrived == b->live) { /* the ones left wait for nobody */
    b->arrived = 0;
    b->gen++;
  }
  /* returns to b->home (uc_link) */
}

/* ca_check_red_zones aborts when a fiber of block b, just run on worker
 * w, wrote below its stack. */
static void ca_check_red_zones(const ca_worker *w, const ca_block *b) {
  for (u32 i = 0; i < b->l->bdim; i++) {
    const unsigned long long *z = (const unsigned long long *)(w->stacks + (size_t)i * CA_FIBER_STACK);
    for (u32 k = 0; k < CA_RED_ZONE / sizeof *z; k++)
      if (z[k]) {
        fprintf(stderr, "capalloc fake GPU: thread %u of block %u overflowed its %u KiB fiber stack\n", i, b->bid,
                (CA_FIBER_STACK - CA_RED_ZONE) >> 10);
        abort();
      }
  }
}

/* ca_run_block runs every thread of block b on worker w, as fibers. */
static bool ca_run_block(ca_worker *w, ca_block *b) {
  u32 n = b->l->bdim;
  if (w->nthreads < n) {
    if (w->stacks) munmap(w->stacks, (size_t)w->nthreads * CA_FIBER_STACK);
    delete[] w->threads;
    w->nthreads = 0;
    w->threads = new ca_thread[n];
    void *m = mmap(nullptr, (size_t)n * CA_FIBER_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      w->stacks = nullptr;
      return false;
    }
    w->stacks = (unsigned char *)m;
    w->nthreads = n;
  }
  b->t = w->threads;
  b->live = n;
  b->cur = b->arrived = b->gen = 0;
  for (u32 i = 0; i < n; i++) {
    ca_thread &t = b->t[i];
    t.tid = i;
    t.bid = b->bid;
    t.bdim = n;
    t.gdim = b->l->grid;
    t.blk = b;
    t.state = CA_RUN;
    t.wait_gen = t.loads = 0;
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = w->stacks + (size_t)i * CA_FIBER_STACK + CA_RED_ZONE;
    t.ctx.uc_stack.ss_size = CA_FIBER_STACK - CA_RED_ZONE;
    t.ctx.uc_link = &b->home;
    makecontext(&t.ctx, ca_fiber_main, 0);
  }
  while (b->live > 0) { /* a fiber came home: it ended; run the next */
    u32 i = b->cur;
    for (u32 k = 0; k < n; k++, i = i + 1 == n ? 0 : i + 1) {
      ca_thread *t = &b->t[i];
      if (t->state == CA_RUN || (t->state == CA_AT_SYNC && t->wait_gen != b->gen)) break;
    }
    b->cur = i;
    ca_self = &b->t[i];
    swapcontext(&b->home, &b->t[i].ctx);
  }
  ca_self = nullptr;
  ca_check_red_zones(w, b);
  return true;
}

/* ca_retire ends idle worker w (held: ca_pool_mu): out of the idle list,
 * its stacks unmapped. Each fake's copy (tests load many) keeps no
 * threads once its launches are over. */
static void ca_retire(ca_worker *w) {
  for (ca_worker **pp = &ca_idle; *pp; pp = &(*pp)->next)
    if (*pp == w) {
      *pp = w->next;
      break;
    }
  if (w->stacks) munmap(w->stacks, (size_t)w->nthreads * CA_FIBER_STACK);
  delete[] w->threads;
  pthread_cond_destroy(&w->cv);
  delete w;
}

/* How long a worker waits idle before it ends. */
#define CA_IDLE_SECONDS 2

static void *ca_worker_main(void *arg) {
  ca_worker *w = (ca_worker *)arg;
  pthread_mutex_lock(&ca_pool_mu);
  for (;;) {
    while (!w->job) {
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += CA_IDLE_SECONDS;
      if (pthread_cond_timedwait(&w->cv, &ca_pool_mu, &until) != 0 && !w->job && !w->taken) {
        ca_retire(w);
        pthread_mutex_unlock(&ca_pool_mu);
        return nullptr;
      }
    }
    ca_block *b = w->job;
    pthread_mutex_unlock(&ca_pool_mu);
    ca_launch *l = b->l;
    if (!ca_run_block(w, b)) {
      int none = 0; /* no stacks for its threads: the launch fails as out of resources */
      __atomic_compare_exchange_n(&l->fault, &none, 701, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    ca_leave(b);
    pthread_mutex_lock(&ca_pool_mu);
    w->job = nullptr;
    w->taken = false;
    w->next = ca_idle;
    ca_idle = w;
    pthread_mutex_unlock(&ca_pool_mu);
    pthread_mutex_lock(&l->mu); /* l lives until done reaches grid */
    l->done++;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_lock(&ca_pool_mu);
  }
  return nullptr;
}

/* ca_take takes n idle workers (making the missing ones) into out; false,
 * with none taken, when a worker cannot be made. */
static bool ca_take(u32 n, std::vector<ca_worker *> &out) {
  pthread_mutex_lock(&ca_pool_mu);
  while (out.size() < n && ca_idle) {
    ca_idle->taken = true;
    out.push_back(ca_idle);
    ca_idle = ca_idle->next;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  while (out.size() < n) {
    ca_worker *w = new ca_worker();
    pthread_cond_init(&w->cv, nullptr);
    w->taken = true;
    if (pthread_create(&w->id, &attr, ca_worker_main, w) != 0) {
      pthread_cond_destroy(&w->cv);
      delete w;
      break;
    }
    pthread_detach(w->id);
    out.push_back(w);
  }
  pthread_attr_destroy(&attr);
  bool ok = out.size() == n;
  if (!ok)
    for (ca_worker *w : out) {
      w->taken = false;
      w->next = ca_idle;
      ca_idle = w;
    }
  pthread_mutex_unlock(&ca_pool_mu);
  return ok;
}

/* The first fault of the last launch of this thread, in words. */
static __thread char ca_fault_text[160];
extern "C" const char *capalloc_host_fault(void) { return ca_fault_text; }

extern "C" int capalloc_host_launch(int k, u32 grid, u32 block, const void *params, const ca_host_env *env) {
  if (k < 0 || k >= (int)(sizeof ca_entries / sizeof ca_entries[0]) || grid == 0 || block == 0 || grid > 4096 || block > 1024)
    return -2;
  ca_fault_text[0] = 0;
  std::vector<ca_worker *> workers;
  if (!ca_take(grid, workers)) return -1;
  ca_launch l;
  memset((void *)&l, 0, sizeof l);
  l.env = env;
  l.fn = ca_entries[k].run;
  l.params = params;
  l.grid = grid;
  l.bdim = block;
  l.misaligned = env && env->misaligned_code > 0 ? env->misaligned_code : 716;
  pthread_mutex_init(&l.mu, nullptr);
  pthread_cond_init(&l.cv, nullptr);
  std::vector<ca_block> blocks(grid);
  unsigned long long first = ca_reserve(env, grid);
  for (u32 b = 0; b < grid; b++) {
    blocks[b].l = &l;
    blocks[b].bid = b;
    ca_admit(&blocks[b], first + b);
    pthread_mutex_lock(&ca_pool_mu);
    workers[b]->job = &blocks[b];
    pthread_cond_signal(&workers[b]->cv);
    pthread_mutex_unlock(&ca_pool_mu);
  }
  pthread_mutex_lock(&l.mu);
  while (l.done < grid) pthread_cond_wait(&l.cv, &l.mu);
  pthread_mutex_unlock(&l.mu);
  pthread_mutex_destroy(&l.mu);
  pthread_cond_destroy(&l.cv);
  if (l.fault > 0 && l.fault_n)
    snprintf(ca_fault_text, sizeof ca_fault_text, "%s %s of %lu B at %p (block %u, thread %u)",
             (uintptr_t)l.fault_p & (l.fault_n - 1u) ? "misaligned" : "illegal", l.fault_write ? "store" : "load", l.fault_n,
             l.fault_p, l.fault_bid, l.fault_tid);
  return l.fault > 0 ? l.fault : 0;
}
#endif
