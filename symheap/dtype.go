package symheap

import (
	"fmt"
	"math"
)

// DType is the element type of a reduction.
type DType int

const (
	Float32 DType = iota
	Int32
	Float16  // IEEE 754 binary16, summed in float32, rounded to nearest even
	BFloat16 // bfloat16, summed in float32, rounded to nearest even
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Int32:
		return "int32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size is the element's size in bytes (0 for an unknown type).
func (d DType) Size() int64 {
	switch d {
	case Float32, Int32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// Algorithm chooses how a collective moves the data: AllReduceWith takes
// Auto, OneShot or TwoShot; AllGatherWith and AllToAllWith take Auto,
// Kernel or CopyEngine.
type Algorithm int

const (
	// Auto picks OneShot up to OneShotMaxBytes and TwoShot above; on
	// the device heap, up to the crossover recorded GPU runs measured for
	// the device and rank count where there is one (auto.go).
	Auto Algorithm = iota
	// OneShot: every rank reads every peer's whole tensor and sums it:
	// the fewest steps, the most traffic (latency-bound sizes).
	OneShot
	// TwoShot: a reduce-scatter (each rank sums its 1/N of the elements)
	// then an all-gather: 2/N of the traffic of OneShot per rank
	// (bandwidth-bound sizes).
	TwoShot
	// Kernel: an all-gather or all-to-all moved by this library's kernels
	// (on the host heap, by the host function's copy).
	Kernel
	// CopyEngine: an all-gather or all-to-all whose bytes the device's
	// copy engines move, one device-to-device copy per peer between two
	// barrier kernels (copyengine.go). On the device heap Auto picks it
	// only where a recorded GPU run measured it faster (auto.go); on the
	// host heap it is the same host copy as Kernel.
	CopyEngine
)

// OneShotMaxBytes is the largest all-reduce Auto runs one-shot, where no
// recorded run says otherwise (auto.go).
const OneShotMaxBytes = 256 << 10

func (a Algorithm) String() string {
	switch a {
	case Auto:
		return "auto"
	case OneShot:
		return "one-shot"
	case TwoShot:
		return "two-shot"
	case Kernel:
		return "kernel"
	case CopyEngine:
		return "copy-engine"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// F16ToFloat32 and Float32ToF16 convert IEEE binary16 bits, rounding to
// nearest even: the same arithmetic as the device kernels (ca_h2f,
// ca_f2h in internal/kernels/collectives.cu), so every backend rounds
// alike.
func F16ToFloat32(h uint16) float32 {
	s, e, m := uint32(h&0x8000)<<16, uint32(h>>10)&0x1f, uint32(h&0x3ff)
	var bits uint32
	switch {
	case e == 0 && m == 0:
		bits = s
	case e == 0: // subnormal: normalize
		sh := uint32(0)
		for m&0x400 == 0 {
			m <<= 1
			sh++
		}
		bits = s | (113-sh)<<23 | (m&0x3ff)<<13
	case e == 31:
		bits = s | 0x7f800000 | m<<13
	default:
		bits = s | (e+112)<<23 | m<<13
	}
	return math.Float32frombits(bits)
}

func Float32ToF16(f float32) uint16 {
	x := math.Float32bits(f)
	s, m := (x>>16)&0x8000, x&0x7fffff
	e := int32((x>>23)&0xff) - 127 + 15
	switch {
	case (x>>23)&0xff == 0xff:
		if m != 0 {
			return uint16(s | 0x7c00 | 0x200)
		}
		return uint16(s | 0x7c00)
	case e >= 31:
		return uint16(s | 0x7c00)
	case e <= 0:
		if e < -10 {
			return uint16(s)
		}
		m |= 0x800000
		shift := uint32(14 - e)
		hm, rem, half := m>>shift, m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && hm&1 == 1) {
			hm++
		}
		return uint16(s | hm)
	}
	hm, rem := m>>13, m&0x1fff
	h := s | uint32(e)<<10 | hm
	if rem > 0x1000 || (rem == 0x1000 && hm&1 == 1) {
		h++
	}
	return uint16(h)
}

// BF16ToFloat32 and Float32ToBF16 convert bfloat16 bits (ca_bf2f,
// ca_f2bf in the kernels).
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

func Float32ToBF16(f float32) uint16 {
	x := math.Float32bits(f)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16 | 0x40) // NaN stays NaN
	}
	return uint16((x + 0x7fff + (x>>16)&1) >> 16)
}
