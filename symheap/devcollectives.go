package symheap

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// The device heap's collectives: this library's kernels
// (internal/kernels/collectives.cu), launched on the rank's stream through
// Allocator.Enqueue, so a capture records them as kernel nodes and every
// replay runs them again. Their only parameters are the peer table's
// address, offsets and sizes, which a graph may freeze; the epochs are in
// the signal pads, read and advanced by the kernels at run time. Every
// wait is bounded by the heap's timeout: a kernel that gives up records
// the rank, peer, epoch and block in the rank's pad and returns, and
// Synchronize reports it as ErrCollectiveTimeout.
//
// Every rank must launch the same collectives on the same sizes (and the
// same kind of device), so their grids match: block b of every rank meets
// block b of the others. Each launch carries the collective's signature
// (signature.go), which every arrival carries next to its epoch: ranks
// that meet in different collectives both fail with ErrCollectiveMismatch.

// Barrier waits, in stream order, until every rank reached it.
func (h *DeviceHeap) Barrier() error {
	return h.collective("Barrier", kernels.Barrier, kernels.Coll{Sig: kernels.Signature(kernels.KindBarrier, 0, 0)}, 1)
}

// AllReduce is AllReduceWith(t, dt, Auto).
func (h *DeviceHeap) AllReduce(t Tensor, dt DType) error { return h.AllReduceWith(t, dt, Auto) }

// AllReduceWith replaces t on every rank with the element-wise sum over
// ranks, in rank order. OneShot: every rank sums every peer's tensor
// (one barrier to start, one per round of grid×block 16-byte packs);
// TwoShot: each rank sums its 1/N share, then gathers the others' (three
// barriers); Auto: OneShot up to OneShotMaxBytes.
func (h *DeviceHeap) AllReduceWith(t Tensor, dt DType, alg Algorithm) error {
	if err := h.bump.checkAllReduce(t, dt, alg); err != nil {
		return err
	}
	alg = resolveAlgorithm(alg, t.Size, h.oneShotMax)
	packs := (t.Size + 15) / 16
	c := kernels.Coll{InOff: uint64(t.Off), Count: uint64(t.Size / dt.Size()), DType: uint32(dt)}
	c.Sig = allReduceSig(alg, dt, t)
	aligned := h.alignedOperands(t.Size, t.Off)
	if alg == OneShot {
		if aligned {
			return h.collective("AllReduce (one-shot)", kernels.AllReduceOneShotAligned, c, ceilDiv(packs, kernels.AlignedSumPacks))
		}
		return h.collective("AllReduce (one-shot)", kernels.AllReduceOneShot, c, packs)
	}
	part := ceilDiv(packs, int64(h.Ranks()))
	if aligned {
		return h.collective("AllReduce (two-shot)", kernels.AllReduceTwoShotAligned, c, ceilDiv(part, kernels.AlignedSumPacks))
	}
	return h.collective("AllReduce (two-shot)", kernels.AllReduceTwoShot, c, part)
}

// alignedOperands says whether a collective's operands suit the aligned
// variants: the size it moves a rank (a tensor or a chunk: every chunk
// then starts 16-aligned too) and every offset a multiple of 16 bytes,
// the size at most kernels.AlignedMaxPacks packs, on a heap whose ranks all map their allocations 16-aligned
// (maxGridAligned > 0, agreed at open). Every rank decides the same: the
// offsets and sizes are the same on every rank. A vector access to a
// misaligned address faults, so nothing else may launch them (but a
// test's forceAligned).
func (h *DeviceHeap) alignedOperands(size int64, offs ...int64) bool {
	if h.kern == nil || h.maxGridAligned == 0 {
		return false
	}
	if h.forceAligned {
		return true
	}
	if size%16 != 0 || size/16 > kernels.AlignedMaxPacks {
		return false
	}
	for _, off := range offs {
		if off%16 != 0 {
			return false
		}
	}
	return true
}

func ceilDiv(n, d int64) int64 { return (n + d - 1) / d }

// AllGather is AllGatherWith(in, out, Auto).
func (h *DeviceHeap) AllGather(in, out Tensor) error { return h.AllGatherWith(in, out, Auto) }

// AllGatherWith writes rank p's in at out's p-th chunk, on every rank:
// out.Size must be Ranks()*in.Size. Kernel: this library's kernels;
// CopyEngine: a copy per rank between barrier kernels (copyengine.go);
// Auto: the copy engines from the size (out.Size) a recorded run
// measured them faster at for the device and rank count, else the
// kernels.
func (h *DeviceHeap) AllGatherWith(in, out Tensor, alg Algorithm) error {
	if err := h.bump.checkAllGather(in, out, h.Ranks(), alg); err != nil {
		return err
	}
	alg = resolveCopy(alg, out.Size, h.copyMin[copyAllGather])
	c := kernels.Coll{InOff: uint64(in.Off), OutOff: uint64(out.Off), Count: uint64(in.Size)}
	c.Sig = copySig(kernels.KindAllGather, alg, c.Count)
	if alg == CopyEngine {
		return h.copyEngine("AllGather (copy engine)", c, func(p int) (dst, src Tensor) {
			return Tensor{Off: out.Off + int64(p)*in.Size, Size: in.Size}, in
		})
	}
	if h.alignedOperands(in.Size, in.Off, out.Off) {
		return h.collective("AllGather", kernels.AllGatherAligned, c, ceilDiv(in.Size/16, kernels.AlignedCopyPacks))
	}
	return h.collective("AllGather", kernels.AllGather, c, in.Size/16)
}

// ReduceScatter writes into out, on rank r, the sum over ranks of their
// in's r-th chunk: in.Size must be Ranks()*out.Size.
func (h *DeviceHeap) ReduceScatter(in, out Tensor, dt DType) error {
	if err := h.bump.checkReduceScatter(in, out, dt, h.Ranks()); err != nil {
		return err
	}
	c := kernels.Coll{InOff: uint64(in.Off), OutOff: uint64(out.Off), Count: uint64(out.Size / dt.Size()), DType: uint32(dt)}
	c.Sig = kernels.Signature(kernels.KindReduceScatter, c.DType, c.Count)
	if h.alignedOperands(out.Size, in.Off, out.Off) {
		return h.collective("ReduceScatter", kernels.ReduceScatterAligned, c, ceilDiv(out.Size/16, kernels.AlignedSumPacks))
	}
	return h.collective("ReduceScatter", kernels.ReduceScatter, c, (out.Size+15)/16)
}

// AllToAll is AllToAllWith(in, out, Auto).
func (h *DeviceHeap) AllToAll(in, out Tensor) error { return h.AllToAllWith(in, out, Auto) }

// AllToAllWith writes into out's p-th chunk, on rank r, rank p's in's
// r-th chunk: in.Size and out.Size must be equal and divisible by
// Ranks(). alg as in AllGatherWith (Auto decides by in.Size).
func (h *DeviceHeap) AllToAllWith(in, out Tensor, alg Algorithm) error {
	if err := h.bump.checkAllToAll(in, out, h.Ranks(), alg); err != nil {
		return err
	}
	alg = resolveCopy(alg, in.Size, h.copyMin[copyAllToAll])
	n := in.Size / int64(h.Ranks())
	c := kernels.Coll{InOff: uint64(in.Off), OutOff: uint64(out.Off), Count: uint64(n)}
	c.Sig = copySig(kernels.KindAllToAll, alg, c.Count)
	if alg == CopyEngine {
		return h.copyEngine("AllToAll (copy engine)", c, func(p int) (dst, src Tensor) {
			return Tensor{Off: out.Off + int64(p)*n, Size: n}, Tensor{Off: in.Off + int64(h.rank)*n, Size: n}
		})
	}
	if h.alignedOperands(n, in.Off, out.Off) {
		return h.collective("AllToAll", kernels.AllToAllAligned, c, ceilDiv(n/16, kernels.AlignedCopyPacks))
	}
	return h.collective("AllToAll", kernels.AllToAll, c, n/16)
}

// CollectivesRun is nil when the heap's collectives run on its driver,
// and otherwise says why not (wrapping errors.ErrUnsupported: a driver
// that runs no device code of this library). The heap's Copy works
// either way.
func (h *DeviceHeap) CollectivesRun() error {
	if h.kern == nil {
		return h.kernErr
	}
	return nil
}

// collective launches kernel name with c (completed with the table, rank,
// ranks and timeout) on items work items of a thread each.
func (h *DeviceHeap) collective(op, name string, c kernels.Coll, items int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.startLocked(op, &c); err != nil {
		return err
	}
	grid := h.grid(items)
	if kernels.IsAligned(name) {
		grid = h.gridUpTo(items, h.maxGridAligned)
	}
	return h.launchLocked(op, name, c.Encode(make([]byte, kernels.CollSize)), grid)
}

// startLocked refuses op on a heap that cannot run it (closed, broken, a
// peer of this process closed, no kernels, too many ranks) and completes
// c with the table, rank, ranks and timeout.
func (h *DeviceHeap) startLocked(op string, c *kernels.Coll) error {
	if err := h.usableLocked(op); err != nil {
		return err
	}
	if err := h.peersOpenLocked(); err != nil {
		return fmt.Errorf("symheap: %s on rank %d: %w", op, h.rank, err)
	}
	if h.Ranks() > kernels.MaxRanks {
		return fmt.Errorf("%w: symheap: %s: the device collectives serve at most %d ranks, this heap has %d", alloc.ErrInvalidValue, op, kernels.MaxRanks, h.Ranks())
	}
	c.Table = uint64(h.table.Ptr())
	c.TimeoutTicks = h.kern.ticks(h.timeout)
	c.Rank, c.NRanks = uint32(h.rank), uint32(h.Ranks())
	return nil
}

// launchLocked enqueues kernel name on the rank's stream.
func (h *DeviceHeap) launchLocked(op, name string, params []byte, grid uint32) error {
	k, kl, block := h.kern.mod.Kernels[name], h.kern.kl, h.kern.block
	err := h.a.Enqueue("symheap "+op, []alloc.Buffer{h.buf, h.table}, func(s driver.Stream) error {
		return kl.LaunchKernel(k, grid, block, params, s)
	})
	if err != nil {
		return fmt.Errorf("symheap: %s on rank %d: %w", op, h.rank, err)
	}
	return nil
}

// peersOpenLocked breaks the heap, with ErrPeerClosed, when a peer of
// this process closed its heap: its collectives are then refused before
// they launch. (A peer in another process marks this rank's pad instead:
// the kernels stop at ca_begin, and Synchronize reports it.)
func (h *DeviceHeap) peersOpenLocked() error {
	for p, m := range h.locals {
		if m != nil && m.closed.Load() {
			h.err = fmt.Errorf("%w: rank %d closed its heap; rank %d's collectives are refused from then on", ErrPeerClosed, p, h.rank)
			return h.err
		}
	}
	return nil
}

// usableLocked refuses work on a closed heap, a broken one, and where the
// driver runs no kernels of ours.
func (h *DeviceHeap) usableLocked(op string) error {
	switch {
	case h.closed:
		return fmt.Errorf("%w: symheap: %s on the closed device heap of rank %d", alloc.ErrClosed, op, h.rank)
	case h.err != nil:
		return fmt.Errorf("symheap: %s on the broken device heap of rank %d: %w", op, h.rank, h.err)
	case h.kern == nil:
		return fmt.Errorf("symheap: %s: %w", op, h.kernErr)
	}
	return nil
}

// Synchronize waits for the rank's stream, then reads the failure record
// of its signal pad: a collective that gave up (a peer that launched or
// replayed fewer times, or died) is ErrCollectiveTimeout naming the ranks,
// the epoch and the block; ranks that met in different collectives are
// ErrCollectiveMismatch naming both; the heap is broken from then on.
func (h *DeviceHeap) Synchronize() error {
	if err := h.a.Synchronize(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("%w: symheap: device heap of rank %d is closed: a collective its graphs replay after the Close is refused on the device without running (nothing written, outputs left as they were); close those graphs", alloc.ErrClosed, h.rank)
	}
	if h.err != nil {
		return h.err
	}
	// One read of the pad from its start through the counts error record:
	// both records, one device round trip.
	b := make([]byte, kernels.PadCountsErrOff+kernels.PadCountsErrBytes)
	if err := h.a.Download(b, h.buf, 0); err != nil {
		return fmt.Errorf("symheap: reading the signal pad of rank %d: %w", h.rank, err)
	}
	if h.err = padFailure(kernels.DecodePadError(b[:kernels.PadErrorBytes]), h.timeout); h.err != nil {
		return h.err
	}
	return h.takeCountsErrLocked(b[kernels.PadCountsErrOff:])
}

// Err is the heap's failure as of the last Synchronize (nil while healthy).
func (h *DeviceHeap) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Write copies dst.Size bytes of src, from srcOff, into this rank's dst in
// stream order (a captured copy reads the host buffer at every replay).
func (h *DeviceHeap) Write(dst Tensor, src *alloc.HostBuffer, srcOff int64) error {
	if err := h.bump.check(dst); err != nil {
		return err
	}
	if err := checkHostRange(dst, src, srcOff); err != nil {
		return err
	}
	return h.local(func() error { return h.a.UploadHost(h.buf, SignalPadBytes+dst.Off, src, srcOff, dst.Size) })
}

// Read copies this rank's src into dst at dstOff, in stream order.
func (h *DeviceHeap) Read(dst *alloc.HostBuffer, dstOff int64, src Tensor) error {
	if err := h.bump.check(src); err != nil {
		return err
	}
	if err := checkHostRange(src, dst, dstOff); err != nil {
		return err
	}
	return h.local(func() error { return h.a.DownloadHost(dst, dstOff, h.buf, SignalPadBytes+src.Off, src.Size) })
}

// CopyLocal copies src into dst within this rank's heap, in stream order.
func (h *DeviceHeap) CopyLocal(dst, src Tensor) error {
	if err := h.bump.checkPair(dst, src); err != nil {
		return err
	}
	return h.local(func() error { return h.a.Copy(h.buf, SignalPadBytes+dst.Off, h.buf, SignalPadBytes+src.Off, src.Size) })
}

// Axpy computes y = a*x + y over this rank's float32 elements: a kernel
// on the rank's stream.
func (h *DeviceHeap) Axpy(y, x Tensor, a float32) error {
	if err := h.bump.checkPair(y, x); err != nil {
		return err
	}
	if err := h.bump.checkElems(y, Float32); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("%w: symheap: Axpy on the closed device heap of rank %d", alloc.ErrClosed, h.rank)
	}
	if h.kern == nil {
		return fmt.Errorf("symheap: Axpy: %w", h.kernErr)
	}
	base := uint64(h.buf.Ptr()) + SignalPadBytes
	k := kernels.AxpyArgs{X: base + uint64(x.Off), Y: base + uint64(y.Off), N: uint64(y.Size / 4), A: a}
	return h.launchLocked("Axpy", kernels.Axpy, k.Encode(make([]byte, kernels.AxpySize)), h.grid(y.Size/4))
}

// local runs a copy of this rank's under the heap's lock, refused once
// the heap is closed.
func (h *DeviceHeap) local(fn func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("%w: symheap: device heap of rank %d is closed", alloc.ErrClosed, h.rank)
	}
	return fn()
}
