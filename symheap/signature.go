package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/internal/kernels"
)

// Signatures: what the ranks must agree on about a collective (its kind,
// the all-reduce's algorithm, the element type and the count), packed by
// kernels.Signature into the 32 bits that every arrival at a barrier
// carries next to its epoch, on both heaps. A rank that meets a peer's
// arrival at its own epoch with another signature, or at an epoch the
// peer cannot be at, fails with ErrCollectiveMismatch naming both ranks
// and both collectives (docs/device-collectives.md, "Signatures").

// resolveAlgorithm is alg with Auto decided by the tensor's size: one-shot
// up to oneShotMax bytes.
func resolveAlgorithm(alg Algorithm, size, oneShotMax int64) Algorithm {
	if alg != Auto {
		return alg
	}
	if size > oneShotMax {
		return TwoShot
	}
	return OneShot
}

// allReduceSig is the signature of an all-reduce of t by alg (resolved).
func allReduceSig(alg Algorithm, dt DType, t Tensor) uint32 {
	kind := uint32(kernels.KindAllReduceOneShot)
	if resolveAlgorithm(alg, t.Size, OneShotMaxBytes) == TwoShot {
		kind = kernels.KindAllReduceTwoShot
	}
	return kernels.Signature(kind, uint32(dt), uint64(t.Size/dt.Size()))
}

// sigName names the collective a signature stands for, e.g. "AllReduce
// (one-shot) of 1000 float32" or "AllGather of 4000 B per rank".
func sigName(s uint32) string {
	d := kernels.DecodeSignature(s)
	count := fmt.Sprint(d.Count)
	if d.Folded {
		count = fmt.Sprintf("2^26 or more (folded to %#x)", d.Count)
	}
	switch d.Kind {
	case kernels.KindBarrier:
		return "Barrier"
	case kernels.KindAllReduceOneShot, kernels.KindAllReduceTwoShot, kernels.KindReduceScatter:
		name := map[uint32]string{kernels.KindAllReduceOneShot: "AllReduce (one-shot)", kernels.KindAllReduceTwoShot: "AllReduce (two-shot)", kernels.KindReduceScatter: "ReduceScatter"}[d.Kind]
		return fmt.Sprintf("%s of %s %v", name, count, DType(d.DType))
	case kernels.KindAllGather, kernels.KindAllToAll:
		name, per := "AllGather", "rank"
		if d.Kind == kernels.KindAllToAll {
			name, per = "AllToAll", "rank pair"
		}
		if d.DType == kernels.SigCopyEngine {
			name += " (copy engine)"
		}
		return fmt.Sprintf("%s of %s B per %s", name, count, per)
	case kernels.KindAllToAllV:
		return fmt.Sprintf("AllToAllV of %s %v in", count, DType(d.DType))
	case 0:
		return "no collective yet"
	}
	return fmt.Sprintf("unknown collective %#x", s)
}

// mismatchError is the ErrCollectiveMismatch that rank found at its epoch
// e in sig, reading peer's arrival at peerEpoch with peerSig.
func mismatchError(rank int, e, sig uint32, peer int, peerEpoch, peerSig uint32) error {
	if peerEpoch == e {
		return fmt.Errorf("%w: at epoch %d rank %d ran %s, rank %d ran %s", ErrCollectiveMismatch, e, rank, sigName(sig), peer, sigName(peerSig))
	}
	return fmt.Errorf("%w: rank %d reached epoch %d in %s, rank %d was at epoch %d in %s: one of them ran collectives the other did not",
		ErrCollectiveMismatch, rank, e, sigName(sig), peer, peerEpoch, sigName(peerSig))
}
