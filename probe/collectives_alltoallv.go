package probe

import (
	"encoding/binary"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// The all_to_all_v row: symheap's AllToAllV of the work tensor's int32s
// into out, with each rank's send counts written from pinned memory in
// the captured body, so every replay routes differently (a2avCounts) and
// must still match an eager run: one graph serves every routing. out is
// zeroed in the body first (from its cleared staging), so the bytes past
// what a round receives compare too.

// allocCounts allocates rank r's counts tensors (the same on every rank)
// and the pinned staging of its send counts.
func (c *collEnv) allocCounts(r int, h symheap.Collectives, a *alloc.Allocator) error {
	var err error
	if c.send, err = h.Alloc(symheap.CountsBytes(collRanks)); err != nil {
		return err
	}
	if c.recv, err = h.Alloc(symheap.CountsBytes(collRanks)); err != nil {
		return err
	}
	hb, err := a.HostAlloc(symheap.CountsBytes(collRanks))
	if err != nil {
		return err
	}
	c.cntHB = append(c.cntHB, hb)
	return nil
}

// a2avCounts is what rank r sends rank q in round k: at most collN/4, the
// work tensor's int32s over collRanks, so no rank sends or receives past
// its buffers.
func a2avCounts(r, q, k int) int64 { return int64((37*k + 11*r + 23*q) % (collN/4 + 1)) }

// fillCounts stages rank r's send counts of round k.
func (c *collEnv) fillCounts(r, k int) {
	for q := range collRanks {
		binary.LittleEndian.PutUint64(c.cntHB[r].Bytes()[8*q:], uint64(a2avCounts(r, q, k)))
	}
}

func allToAllV(c *collEnv, r int) error {
	return c.steps(r,
		func(h symheap.Collectives) error { return h.Write(c.send, c.cntHB[r], 0) },
		func(h symheap.Collectives) error { return h.Write(c.out, c.outHB[r], 0) },
		func(h symheap.Collectives) error { return h.AllToAllV(c.work, c.out, c.send, c.recv, symheap.Int32) })
}
