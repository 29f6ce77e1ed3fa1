package main

import (
	"encoding/binary"

	"github.com/capalloc/capalloc/symheap"
)

// The alltoallv rows: symheap's AllToAllV with uniform routing (each rank
// sends every rank an equal share of its input, as the alltoall rows
// move), so the two compare directly: the difference is what reading the
// counts at run time costs. The counts are written into every rank's heap
// once, before the capture; the kernel reads them at every replay.

// allToAllVStep allocates every rank's counts tensors, writes the uniform
// counts (float32 elements per peer) and returns the row's step.
func allToAllVStep(w *world, ins, outs []symheap.Tensor) (func(r int) error, error) {
	n := len(w.heaps)
	send, recv := make([]symheap.Tensor, n), make([]symheap.Tensor, n)
	counts := make([]byte, symheap.CountsBytes(n))
	for q := range n {
		binary.LittleEndian.PutUint64(counts[8*q:], uint64(ins[0].Size/int64(n)/4))
	}
	for r, h := range w.heaps {
		var err error
		if send[r], err = h.Alloc(symheap.CountsBytes(n)); err != nil {
			return nil, err
		}
		if recv[r], err = h.Alloc(symheap.CountsBytes(n)); err != nil {
			return nil, err
		}
		if err := w.as[r].Upload(h.Buffer(), symheap.SignalPadBytes+send[r].Off, counts); err != nil {
			return nil, err
		}
	}
	return func(r int) error { return w.heaps[r].AllToAllV(ins[r], outs[r], send[r], recv[r], symheap.Float32) }, nil
}
