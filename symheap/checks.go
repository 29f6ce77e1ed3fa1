package symheap

import (
	"fmt"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// The operand checks both heaps make before anything is enqueued.

// checkElems checks a tensor of the heap that holds whole elements of dt.
func (b *bump) checkElems(t Tensor, dt DType) error {
	if err := b.check(t); err != nil {
		return err
	}
	if dt.Size() == 0 {
		return fmt.Errorf("%w: symheap: element type %v", alloc.ErrInvalidValue, dt)
	}
	if t.Size%dt.Size() != 0 {
		return fmt.Errorf("%w: symheap: %d B is not a whole number of %v", alloc.ErrInvalidSize, t.Size, dt)
	}
	return nil
}

// checkAllReduce checks an all-reduce's algorithm and its tensor of
// whole elements of dt.
func (b *bump) checkAllReduce(t Tensor, dt DType, alg Algorithm) error {
	if err := checkAlgorithm(alg); err != nil {
		return err
	}
	return b.checkElems(t, dt)
}

// checkChunks checks that whole holds ranks chunks of part's size, and
// that both are in the heap and do not overlap.
func (b *bump) checkChunks(whole, part Tensor, ranks int) error {
	if whole.Size != int64(ranks)*part.Size {
		return fmt.Errorf("%w: symheap: %d B is not %d chunks of %d B", alloc.ErrInvalidSize, whole.Size, ranks, part.Size)
	}
	return b.disjoint(whole, part)
}

// checkAllGather checks an all-gather's algorithm and that out holds
// ranks chunks of in's size.
func (b *bump) checkAllGather(in, out Tensor, ranks int, alg Algorithm) error {
	if err := checkCopyAlgorithm("all-gather", alg); err != nil {
		return err
	}
	return b.checkChunks(out, in, ranks)
}

// checkReduceScatter checks that in holds ranks chunks of out's size and
// out whole elements of dt.
func (b *bump) checkReduceScatter(in, out Tensor, dt DType, ranks int) error {
	if err := b.checkChunks(in, out, ranks); err != nil {
		return err
	}
	return b.checkElems(out, dt)
}

// checkAllToAll checks the algorithm, in and out of an all-to-all over
// ranks.
func (b *bump) checkAllToAll(in, out Tensor, ranks int, alg Algorithm) error {
	if err := checkCopyAlgorithm("all-to-all", alg); err != nil {
		return err
	}
	if in.Size != out.Size || in.Size%int64(ranks) != 0 {
		return fmt.Errorf("%w: symheap: all-to-all of %d B into %d B over %d ranks", alloc.ErrInvalidSize, in.Size, out.Size, ranks)
	}
	return b.disjoint(in, out)
}

// disjoint checks two tensors of the heap that do not overlap.
func (b *bump) disjoint(x, y Tensor) error {
	if err := b.check(x); err != nil {
		return err
	}
	if err := b.check(y); err != nil {
		return err
	}
	if x.Off < y.Off+y.Size && y.Off < x.Off+x.Size {
		return fmt.Errorf("%w: symheap: tensors [%d, +%d) and [%d, +%d) overlap", alloc.ErrInvalidValue, x.Off, x.Size, y.Off, y.Size)
	}
	return nil
}

// checkPair checks two tensors of the heap of the same size.
func (b *bump) checkPair(dst, src Tensor) error {
	if dst.Size != src.Size {
		return fmt.Errorf("%w: symheap: %d B into %d B", alloc.ErrInvalidSize, src.Size, dst.Size)
	}
	if err := b.check(dst); err != nil {
		return err
	}
	return b.check(src)
}

// checkHostRange checks t.Size bytes at off of a host buffer.
func checkHostRange(t Tensor, hb *alloc.HostBuffer, off int64) error {
	if hb == nil || hb.Bytes() == nil {
		return fmt.Errorf("%w: symheap: nil or closed host buffer", alloc.ErrInvalidBuffer)
	}
	if off < 0 || off > hb.Size() || t.Size > hb.Size()-off {
		return fmt.Errorf("%w: symheap: %d B at offset %d of a %d B host buffer", alloc.ErrOutOfRange, t.Size, off, hb.Size())
	}
	return nil
}

// padFailure is the error a pad's failure record reports (nil: none).
func padFailure(e kernels.PadError, timeout time.Duration) error {
	switch e.Status {
	case kernels.ErrNone:
		return nil
	case kernels.ErrTimeout:
		return fmt.Errorf("%w: rank %d waited %v for rank %d to reach epoch %d (block %d): did it launch or replay fewer times?",
			ErrCollectiveTimeout, e.Rank, timeout, e.Peer, e.Epoch, e.Block)
	case kernels.ErrMismatch:
		return fmt.Errorf("%w (block %d)", mismatchError(int(e.Rank), e.Epoch, e.Sig, int(e.Peer), e.PeerEpoch, e.PeerSig), e.Block)
	case kernels.ErrPeerBroken:
		if c := e.Cause; c.Status == kernels.ErrMismatch {
			return fmt.Errorf("rank %d stopped waiting at epoch %d (block %d): rank %d's heap broke: %w",
				e.Rank, e.Epoch, e.Block, e.Peer, mismatchError(int(c.Rank), c.Epoch, c.Sig, int(c.Peer), c.PeerEpoch, c.PeerSig))
		}
		return fmt.Errorf("%w: rank %d stopped waiting at epoch %d (block %d): rank %d's heap broke first",
			ErrCollectiveTimeout, e.Rank, e.Epoch, e.Block, e.Peer)
	case kernels.ErrClosed: // a kernel met closed[peer] (DeviceHeap.markClosed)
		return fmt.Errorf("%w: rank %d closed its heap; rank %d's collectives stopped before touching any heap (or its signal wait stopped waiting)", ErrPeerClosed, e.Peer, e.Rank)
	case kernels.ErrSignalTimeout:
		return signalTimeout(int(e.Rank), timeout, int(e.Peer), e.Epoch, e.PeerEpoch)
	case kernels.ErrLaunch:
		return fmt.Errorf("%w: symheap: rank %d: a collective launched with %d ranks or more blocks than the kernels serve", alloc.ErrInvalidValue, e.Rank, e.Peer)
	}
	return fmt.Errorf("%w: symheap: rank %d's signal pad holds unknown status %d", driver.ErrDriver, e.Rank, e.Status)
}
