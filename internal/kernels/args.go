package kernels

import (
	"encoding/binary"
	"math"
)

// Limits of the source (CA_MAX_RANKS, CA_MAX_BLOCKS, CA_PAD_BYTES).
const (
	MaxRanks  = 8
	MaxBlocks = 64
	PadBytes  = 8192
)

// Byte offsets in the signal pad (struct ca_pad, whose static_asserts
// check them): the failure record at 0 (PadErrorBytes of it decoded by
// DecodePadError), then epoch_of[MaxBlocks] u32, then
// arrive[MaxBlocks][MaxRanks] u64 (epoch | signature<<32), then
// closed[MaxRanks] u32 (nonzero: that rank closed its heap; written by the
// host, read by every kernel at its start), then, 64-byte aligned,
// SignalSlots slots of SignalSlotBytes: the count peers' signals add to
// (u32 at SignalCountOff) and what this rank's waits consumed (u32 at
// SignalConsumedOff).
const (
	PadEpochsOff  = 64
	PadArrivesOff = PadEpochsOff + 4*MaxBlocks
	PadClosedOff  = PadArrivesOff + 8*MaxBlocks*MaxRanks
	PadSignalsOff = (PadClosedOff + 4*MaxRanks + 63) &^ 63

	SignalSlots       = 16
	SignalSlotBytes   = 64
	SignalCountOff    = 0
	SignalConsumedOff = 4
)

// Element types of the reductions (the source's CA_F32...).
const (
	F32  = 0
	I32  = 1
	F16  = 2
	BF16 = 3
)

// Coll is the collectives' parameter (struct ca_coll): 56 bytes.
type Coll struct {
	Table         uint64 // device address of the peer table
	InOff, OutOff uint64 // heap offsets
	Count         uint64 // elements of a reduction, bytes of a copy
	TimeoutTicks  uint64 // of the kernels' global timer
	Rank, NRanks  uint32
	DType         uint32
	Sig           uint32 // Signature of the collective, carried by every arrival
}

// CollSize is the size of struct ca_coll.
const CollSize = 56

// Encode writes c as the source lays it out (little-endian, natural
// alignment) into b, which must hold CollSize bytes, and returns it.
func (c *Coll) Encode(b []byte) []byte {
	b = b[:CollSize]
	putU32s(putU64s(b, c.Table, c.InOff, c.OutOff, c.Count, c.TimeoutTicks), c.Rank, c.NRanks, c.DType, c.Sig)
	return b
}

// putU64s writes vs into b one after the other, little-endian, and
// returns what follows them: the encoders write each struct's fields in
// the source's order, so no offset is written twice.
func putU64s(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		binary.LittleEndian.PutUint64(b, v)
		b = b[8:]
	}
	return b
}

// putU32s is putU64s for 32-bit fields.
func putU32s(b []byte, vs ...uint32) []byte {
	for _, v := range vs {
		binary.LittleEndian.PutUint32(b, v)
		b = b[4:]
	}
	return b
}

// P2P is the point-to-point kernels' parameter (struct ca_p2p): Coll's
// table, rank, ranks and timeout; InOff the source, OutOff the
// destination and Count the bytes of a put; Slot and Value of a signal or
// a wait; Peer the rank a put or signal reaches. 72 bytes.
type P2P struct {
	Coll
	Peer, Slot, Value uint32
}

// P2PSize is the size of struct ca_p2p.
const P2PSize = CollSize + 16

// Encode writes p into b (P2PSize bytes) and returns it.
func (p *P2P) Encode(b []byte) []byte {
	b = b[:P2PSize]
	p.Coll.Encode(b)
	putU32s(b[CollSize:], p.Peer, p.Slot, p.Value, 0)
	return b
}

// Collective kinds, the low bits of a Signature.
const (
	KindBarrier = 1 + iota
	KindAllReduceOneShot
	KindAllReduceTwoShot
	KindAllGather
	KindAllToAll
	KindReduceScatter
)

// A signature is what every rank must agree on about a collective, in the
// 32 bits that travel next to the epoch in each arrival (both heaps):
//
//	bits 0-2  kind (KindBarrier...; the all-reduce's algorithm is its kind)
//	bits 3-4  element type (reductions); for an all-gather or all-to-all
//	          the variant (0 the kernels, SigCopyEngine the copy engines);
//	          0 for the barrier
//	bit  5    the count field is a fold of a count of 2^26 or more
//	bits 6-31 count (elements of a reduction, bytes of a copy per rank)
//
// Two collectives with the same signature agree on kind, element type and
// count exactly below 2^26, and up to a 26-bit fold above.
const (
	sigCountBits = 26
	sigFolded    = 1 << 5
)

// SigCopyEngine is the element-type field of an all-gather's or
// all-to-all's signature when the copy engines move its bytes between
// barrier kernels that carry the signature (symheap/copyengine.go): ranks
// that run the two variants of one collective fail with a mismatch.
const SigCopyEngine = 1

// Signature packs a collective's kind, element type and count.
func Signature(kind, dtype uint32, count uint64) uint32 {
	s := kind&7 | (dtype&3)<<3
	if count >= 1<<sigCountBits {
		count = (count ^ count>>sigCountBits ^ count>>(2*sigCountBits)) & (1<<sigCountBits - 1)
		s |= sigFolded
	}
	return s | uint32(count)<<6
}

// Sig is a decoded Signature.
type Sig struct {
	Kind, DType uint32
	Count       uint64 // exact unless Folded
	Folded      bool
}

// DecodeSignature unpacks s.
func DecodeSignature(s uint32) Sig {
	return Sig{Kind: s & 7, DType: s >> 3 & 3, Count: uint64(s >> 6), Folded: s&sigFolded != 0}
}

// AxpyArgs is capalloc_axpy's parameter (struct ca_axpy): y = A*x + y over
// N float32. 32 bytes.
type AxpyArgs struct {
	X, Y, N uint64
	A       float32
}

// AxpySize is the size of struct ca_axpy.
const AxpySize = 32

// Encode writes k into b (AxpySize bytes) and returns it.
func (k *AxpyArgs) Encode(b []byte) []byte {
	b = b[:AxpySize]
	putU32s(putU64s(b, k.X, k.Y, k.N), math.Float32bits(k.A), 0)
	return b
}

// The failure record's status at the start of each rank's signal pad.
const (
	ErrNone       = 0
	ErrTimeout    = 1 // a wait passed the timeout
	ErrPeerBroken = 2 // a peer's heap broke while this rank waited for it
	ErrLaunch     = 3 // a launch the source cannot serve (too many ranks or blocks)
	ErrMismatch   = 4 // a peer arrived with another collective's signature, or at an epoch it cannot be at
	ErrClosed     = 5 // a kernel started after rank Peer closed its heap (it stopped at ca_begin), or a signal wait saw it close
	// ErrSignalTimeout: a signal wait passed the timeout; Peer is the
	// slot, Epoch the count it waited for, PeerEpoch the count it saw.
	ErrSignalTimeout = 6
)

// PadError is the failure record (struct ca_pad's first 15 words): the
// status, the rank, peer, epoch and block of the first failure, this
// rank's signature, and the peer's arrival as last read (its epoch and
// signature). A rank that stopped because its peer broke (ErrPeerBroken)
// copies what broke that peer as the cause: the peer's own failure, or
// the cause the peer copied in turn, so the first failure travels.
type PadError struct {
	Status, Rank, Peer, Epoch, Block uint32
	Sig, PeerEpoch, PeerSig          uint32
	Cause                            PadCause
}

// PadCause is the first failure behind an ErrPeerBroken: the failing
// rank's status, rank, peer, epoch, the peer's epoch and both signatures.
type PadCause struct {
	Status, Rank, Peer, Epoch, PeerEpoch, Sig, PeerSig uint32
}

// PadErrorBytes is how much of the pad PadError reads.
const PadErrorBytes = 60

// DecodePadError reads the failure record from the pad's first bytes.
func DecodePadError(b []byte) PadError {
	var w [PadErrorBytes / 4]uint32
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return PadError{Status: w[0], Rank: w[1], Peer: w[2], Epoch: w[3], Block: w[4], Sig: w[5], PeerEpoch: w[6], PeerSig: w[7],
		Cause: PadCause{Status: w[8], Rank: w[9], Peer: w[10], Epoch: w[11], PeerEpoch: w[12], Sig: w[13], PeerSig: w[14]}}
}
