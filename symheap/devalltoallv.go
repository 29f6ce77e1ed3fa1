package symheap

import (
	"fmt"

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
// and returned as ErrCountsOutOfRange; the heap stays usable.
func (h *DeviceHeap) takeCountsErrLocked(rec []byte) error {
	e := kernels.DecodeCountsErr(rec)
	if e.Status == 0 {
		return nil
	}
	if err := h.a.Upload(h.buf, kernels.PadCountsErrOff, make([]byte, kernels.PadCountsErrBytes)); err != nil {
		return fmt.Errorf("symheap: clearing the counts error of rank %d: %w", h.rank, err)
	}
	return countsError(h.rank, e)
}
