package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// AllToAllV is Heap.AllToAllV on the device: capalloc_alltoallv reads
// every rank's counts from the heaps when it runs, checks them on the
// device (every rank alike), and records bad ones in this rank's pad,
// which Synchronize reports as ErrCountsOutOfRange and clears: the heap
// is not broken by it. Its grid is sized by the larger of in and out.
func (h *DeviceHeap) AllToAllV(in, out, sendCounts, recvCounts Tensor, dt DType) error {
	if err := h.bump.checkAllToAllV(in, out, sendCounts, recvCounts, dt, h.Ranks()); err != nil {
		return err
	}
	v := kernels.AllToAllVArgs{
		Coll:     kernels.Coll{InOff: uint64(in.Off), OutOff: uint64(out.Off), Count: uint64(in.Size), DType: uint32(dt), Sig: allToAllVSig(in, dt)},
		OutBytes: uint64(out.Size), SendOff: uint64(sendCounts.Off), RecvOff: uint64(recvCounts.Off),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.startLocked("AllToAllV", &v.Coll); err != nil {
		return err
	}
	grid := h.grid((max(in.Size, out.Size) + 15) / 16)
	return h.launchLocked("AllToAllV", kernels.AllToAllV, v.Encode(make([]byte, kernels.AllToAllVSize)), grid)
}

// takeCountsErrLocked decodes rec, the counts error record of this rank's
// pad as Synchronize read it (the stream idle): a recorded one is cleared
// and returned as ErrCountsOutOfRange (driver.ErrDriver where the record
// is not one the kernel writes); the heap stays usable.
func (h *DeviceHeap) takeCountsErrLocked(rec []byte) error {
	e, err := decodeCountsRecord(rec, h.Ranks())
	if err == nil && e.Status == 0 {
		return nil
	}
	if err := h.a.Upload(h.buf, kernels.PadCountsErrOff, make([]byte, kernels.PadCountsErrBytes)); err != nil {
		return fmt.Errorf("symheap: clearing the counts error of rank %d: %w", h.rank, err)
	}
	if err != nil {
		return fmt.Errorf("%w: symheap: rank %d's signal pad holds a counts error record no kernel writes: %w", driver.ErrDriver, h.rank, err)
	}
	return countsError(h.rank, e)
}

// decodeCountsRecord decodes a counts error record (kernels.
// PadCountsErrBytes) and refuses one capalloc_alltoallv does not write
// for ranks ranks (ca_counts_check): a status it has no name for, ranks
// past the heap's, a room left below 0, a count recorded as negative that
// is not, or as past its room that is not. Status 0 is no record.
func decodeCountsRecord(rec []byte, ranks int) (kernels.CountsErr, error) {
	if len(rec) != kernels.PadCountsErrBytes {
		return kernels.CountsErr{}, fmt.Errorf("a record of %d B, not %d", len(rec), kernels.PadCountsErrBytes)
	}
	e := kernels.DecodeCountsErr(rec)
	past := e.Status == kernels.CountsPastSend || e.Status == kernels.CountsPastRecv
	switch {
	case e.Status == 0:
		return e, nil
	case e.Status != kernels.CountsNegative && !past:
		return e, fmt.Errorf("status %d", e.Status)
	case int64(e.Sender) >= int64(ranks) || int64(e.Receiver) >= int64(ranks):
		return e, fmt.Errorf("sender %d, receiver %d of %d ranks", e.Sender, e.Receiver, ranks)
	case e.Limit < 0:
		return e, fmt.Errorf("room left %d", e.Limit)
	case e.Status == kernels.CountsNegative && e.Value >= 0:
		return e, fmt.Errorf("count %d recorded as negative", e.Value)
	case past && e.Value <= e.Limit:
		return e, fmt.Errorf("count %d recorded as past a room of %d", e.Value, e.Limit)
	}
	return e, nil
}
