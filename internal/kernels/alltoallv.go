package kernels

import "encoding/binary"

// AllToAllV is the all-to-all whose per-peer counts the kernel reads from
// the heaps at run time (collectives.cu, "all-to-all with counts on the
// device").
const AllToAllV = "capalloc_alltoallv"

// KindAllToAllV is AllToAllV's signature kind; its count is in's
// elements, its element type the counts' unit.
const KindAllToAllV = KindReduceScatter + 1

// AllToAllVArgs is capalloc_alltoallv's parameter (struct ca_a2av):
// Coll's InOff, OutOff and DType, Count in's bytes; OutBytes out's bytes;
// SendOff and RecvOff the counts tensors' heap offsets (Ranks int64
// each). 80 bytes.
type AllToAllVArgs struct {
	Coll
	OutBytes, SendOff, RecvOff uint64
}

// AllToAllVSize is the size of struct ca_a2av.
const AllToAllVSize = CollSize + 24

// Encode writes v into b (AllToAllVSize bytes) and returns it.
func (v *AllToAllVArgs) Encode(b []byte) []byte {
	b = b[:AllToAllVSize]
	v.Coll.Encode(b)
	putU64s(b[CollSize:], v.OutBytes, v.SendOff, v.RecvOff)
	return b
}

// The counts error record in the signal pad (struct ca_pad's verr), at
// PadCountsErrOff: status (0: none, else Counts...), sender, receiver
// (u32s at 4 and 8), value and limit (u64s at 16 and 24), elements. The
// kernel writes it only while status is 0; the host reads and clears it
// at Synchronize: a counts error does not break the heap.
const (
	PadCountsErrOff   = PadSignalsOff + SignalSlots*SignalSlotBytes
	PadCountsErrBytes = 32
)

// Counts error statuses (the source's CA_COUNTS_...).
const (
	CountsNegative = 1 // a count below zero
	CountsPastSend = 2 // a rank's sends reach past its in
	CountsPastRecv = 3 // a rank's receives reach past its out
)

// CountsErr is a decoded counts error record.
type CountsErr struct {
	Status, Sender, Receiver uint32
	Value, Limit             int64
}

// DecodeCountsErr reads the record from PadCountsErrBytes bytes.
func DecodeCountsErr(b []byte) CountsErr {
	le := binary.LittleEndian
	return CountsErr{Status: le.Uint32(b), Sender: le.Uint32(b[4:]), Receiver: le.Uint32(b[8:]),
		Value: int64(le.Uint64(b[16:])), Limit: int64(le.Uint64(b[24:]))}
}
