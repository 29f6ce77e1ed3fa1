package kernels

import (
	"encoding/binary"
	"math"
)

// Limits of the source (CA_MAX_RANKS, CA_MAX_BLOCKS, CA_PAD_BYTES).
const (
	MaxRanks  = 8
	MaxBlocks = 64
	PadBytes  = 4096
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
}

// CollSize is the size of struct ca_coll.
const CollSize = 56

// Encode writes c as the source lays it out (little-endian, natural
// alignment) into b, which must hold CollSize bytes, and returns it.
func (c *Coll) Encode(b []byte) []byte {
	b = b[:CollSize]
	le := binary.LittleEndian
	le.PutUint64(b[0:], c.Table)
	le.PutUint64(b[8:], c.InOff)
	le.PutUint64(b[16:], c.OutOff)
	le.PutUint64(b[24:], c.Count)
	le.PutUint64(b[32:], c.TimeoutTicks)
	le.PutUint32(b[40:], c.Rank)
	le.PutUint32(b[44:], c.NRanks)
	le.PutUint32(b[48:], c.DType)
	le.PutUint32(b[52:], 0)
	return b
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
	le := binary.LittleEndian
	le.PutUint64(b[0:], k.X)
	le.PutUint64(b[8:], k.Y)
	le.PutUint64(b[16:], k.N)
	le.PutUint32(b[24:], math.Float32bits(k.A))
	le.PutUint32(b[28:], 0)
	return b
}

// The error word at the start of each rank's signal pad.
const (
	ErrNone       = 0
	ErrTimeout    = 1 // a wait passed the timeout
	ErrPeerBroken = 2 // a peer's heap broke while this rank waited for it
	ErrLaunch     = 3 // a launch the source cannot serve (too many ranks or blocks)
	ErrClosed     = 4 // written by the host: rank Peer closed its heap (kernels stop at ca_begin)
)

// PadError is the error word: status, then the rank, peer, epoch and block
// of the first failure. It is 20 bytes at offset 0 of the pad.
type PadError struct {
	Status, Rank, Peer, Epoch, Block uint32
}

// PadErrorBytes is how much of the pad PadError reads.
const PadErrorBytes = 20

// DecodePadError reads the error word from the pad's first bytes.
func DecodePadError(b []byte) PadError {
	le := binary.LittleEndian
	return PadError{Status: le.Uint32(b[0:]), Rank: le.Uint32(b[4:]), Peer: le.Uint32(b[8:]), Epoch: le.Uint32(b[12:]), Block: le.Uint32(b[16:])}
}
