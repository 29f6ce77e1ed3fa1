package symheap

import (
	"fmt"
	"math"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/kernels"
)

// The copy-engine variant of the device heap's all-gather and all-to-all
// (Algorithm CopyEngine): the bytes move by the driver's device-to-device
// copy (driver.Driver.CopyDtoDAsync: cudaMemcpyAsync, hipMemcpyAsync) between
// the peers' heap addresses as this process maps them, on the rank's
// stream, so a capture records memcpy nodes that the device's copy
// engines run at every replay, instead of SMs running a kernel.
//
// Each rank PULLS: it copies every rank's input (its chunk of it, for an
// all-to-all) into its own output. So each rank writes only its own
// memory, and its output is complete when its own stream reaches the end
// of the collective; a push would write into peers' outputs, which then
// depend on every peer's stream. Rank r starts at its own chunk, then
// pulls from r+1, r+2, ... so the ranks do not all read rank 0 first.
//
// The synchronization is the heap's barrier kernel (signal.go's epochs in
// the pads), carrying the collective's signature (its variant in the
// signature's element-type field, kernels.SigCopyEngine), launched twice
// around the copies in one stream-ordered call:
//
//  1. barrier: every rank's stream reached the collective, so every
//     input is written before any copy reads it;
//  2. the copies, in stream order after the barrier kernel;
//  3. barrier: every rank's copies are done (they precede its arrival in
//     its stream), so no rank rewrites its input, or returns, while a
//     peer may still read it.
//
// The errors are the kernels': a timeout, a mismatch with a peer (also a
// peer running the other variant), a closed peer, reported by
// Synchronize. One difference: the kernel variant stops on the device
// when its first barrier fails, writing nothing; the copies are already
// queued behind that barrier and still run, so after such a failure
// (reported, the heap broken) this rank's output holds what its peers'
// inputs held then. Like Copy, a graph holding copy-engine collectives
// must be closed before the heap: its memcpy nodes hold the peers'
// addresses, which a replay after the Close would read unmapped.

// checkCopyAlgorithm accepts Auto, Kernel and CopyEngine.
func checkCopyAlgorithm(op string, alg Algorithm) error {
	if alg != Auto && alg != Kernel && alg != CopyEngine {
		return fmt.Errorf("%w: symheap: %s algorithm %v (want auto, kernel or copy-engine)", alloc.ErrInvalidValue, op, alg)
	}
	return nil
}

// resolveCopy is alg with Auto decided by the collective's size: the copy
// engines from copyMin bytes on (NoCopyEngine: never).
func resolveCopy(alg Algorithm, size, copyMin int64) Algorithm {
	if alg != Auto {
		return alg
	}
	if size >= copyMin {
		return CopyEngine
	}
	return Kernel
}

// copySig is the signature of an all-gather or all-to-all (kind) of count
// bytes per rank (pair) by alg (resolved).
func copySig(kind uint32, alg Algorithm, count uint64) uint32 {
	var variant uint32
	if alg == CopyEngine {
		variant = kernels.SigCopyEngine
	}
	return kernels.Signature(kind, variant, count)
}

// copyEngine runs a copy collective on the copy engines: the barrier
// kernel, then for every rank p (this rank first) a copy of p's src into
// this rank's dst as pull(p) names them, then the barrier kernel again,
// all in one Enqueue. A call that fails after the first barrier was
// queued leaves this rank an epoch ahead of its peers: the heap is broken
// then (its peers time out at the second barrier).
func (h *DeviceHeap) copyEngine(op string, c kernels.Coll, pull func(p int) (dst, src Tensor)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.startLocked(op, &c); err != nil {
		return err
	}
	type copyOp struct {
		dst, src driver.DevicePtr
		n        int64
	}
	n := h.Ranks()
	var copies []copyOp
	for i := range n {
		p := (h.rank + i) % n
		dst, src := pull(p)
		if dst.Size > 0 {
			copies = append(copies, copyOp{h.bases[h.rank] + SignalPadBytes + driver.DevicePtr(dst.Off), h.bases[p] + SignalPadBytes + driver.DevicePtr(src.Off), dst.Size})
		}
	}
	params := c.Encode(make([]byte, kernels.CollSize))
	k, kl, block, d := h.kern.mod.Kernels[kernels.Barrier], h.kern.kl, h.kern.block, h.a.Driver()
	started := false
	err := h.a.Enqueue("symheap "+op, []alloc.Buffer{h.buf, h.table}, func(s driver.Stream) error {
		if err := kl.LaunchKernel(k, 1, block, params, s); err != nil {
			return err
		}
		started = true
		for _, x := range copies {
			if err := d.CopyDtoDAsync(x.dst, x.src, x.n, s); err != nil {
				return err
			}
		}
		return kl.LaunchKernel(k, 1, block, params, s)
	})
	if err != nil {
		err = fmt.Errorf("symheap: %s on rank %d: %w", op, h.rank, err)
		if started {
			h.err = fmt.Errorf("%w (after its first barrier was queued: the heap is broken)", err)
		}
		return err
	}
	return nil
}

// Auto's copy-engine choice comes from measurements, as its one-shot
// crossover does (auto.go): autotable.go holds, per device kind, rank
// count and collective, the smallest size from which the recorded run
// measured the copy-engine variant faster than the kernels, there and at
// every larger size measured with both (collbench's /copy rows against
// its kernel rows). Where no run recorded one, Auto keeps the kernels.
// The ranks of a heap agree at open on the largest of their thresholds:
// the copy engines run only where every rank's device measured them
// faster (the variant is part of the signature).

// CopyEngineRow is one row of the recorded copy-engine table.
type CopyEngineRow struct {
	Kind     string // DeviceKind of the device the run measured
	Op       string // "allgather" or "alltoall" (collbench's op names)
	Ranks    int
	MinBytes int64  // Auto runs the copy engines from this size on (the all-gather's output, the all-to-all's input)
	Run      string // the recorded run's folder under testdata/gpu
}

// NoCopyEngine is the threshold where no run recorded one: never.
const NoCopyEngine = math.MaxInt64

// The collectives with a copy-engine variant, indexing the thresholds.
const (
	copyAllGather = iota
	copyAllToAll
	copyOps
)

var copyOpNames = [copyOps]string{"allgather", "alltoall"}

// CopyEngineMinFor is Auto's copy-engine threshold for op ("allgather",
// "alltoall") on ranks of a device of kind: the recorded row, or
// NoCopyEngine (recorded false) where none is.
func CopyEngineMinFor(kind, op string, ranks int) (minBytes int64, recorded bool) {
	for _, r := range recordedCopyEngineMin {
		if r.Kind == kind && r.Op == op && r.Ranks == ranks {
			return r.MinBytes, true
		}
	}
	return NoCopyEngine, false
}

// copyEngineMins is CopyEngineMinFor of every copy collective.
func copyEngineMins(kind string, ranks int) (m [copyOps]int64) {
	for i, op := range copyOpNames {
		m[i], _ = CopyEngineMinFor(kind, op, ranks)
	}
	return m
}

// agreeCopyEngine is the thresholds every rank takes from every rank's
// device: the largest among the ranks whose collectives run.
func agreeCopyEngine(devs []rankDevice) (m [copyOps]int64) {
	first := true
	for _, d := range devs {
		if !d.runs {
			continue
		}
		for i := range m {
			if first || d.copyMin[i] > m[i] {
				m[i] = max(0, d.copyMin[i])
			}
		}
		first = false
	}
	if first {
		for i := range m {
			m[i] = NoCopyEngine
		}
	}
	return m
}
