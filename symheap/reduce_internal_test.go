package symheap

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// reduceRanks are the sources of the reduce tests and benchmark: 4 ranks
// of random elements of dt, n bytes each.
func reduceRanks(dt DType, n int, seed uint64) [][]byte {
	r := rand.New(rand.NewPCG(seed, 1))
	srcs := make([][]byte, 4)
	for i := range srcs {
		srcs[i] = make([]byte, n)
		switch dt {
		case Float32:
			for j, v := 0, elems[float32](srcs[i]); j < len(v); j++ {
				v[j] = float32(r.NormFloat64())
			}
		case Int32:
			for j, v := 0, elems[int32](srcs[i]); j < len(v); j++ {
				v[j] = int32(r.Uint32())
			}
		case Float16, BFloat16:
			narrow := Float32ToF16
			if dt == BFloat16 {
				narrow = Float32ToBF16
			}
			for j, v := 0, elems[uint16](srcs[i]); j < len(v); j++ {
				v[j] = narrow(float32(r.NormFloat64()))
			}
		}
	}
	return srcs
}

// reduce sums element by element in rank order, in float32 for the float
// types (halves widened, summed, rounded once) and wrapping for int32,
// starting from the first rank's value (so -0 + -0 stays -0), across
// chunk boundaries, into a destination that may be a source.
func TestReduceMatchesElementwiseSum(t *testing.T) {
	const n = 3*reduceChunk*4 + 40 // chunks and a partial one, for every element size
	for _, dt := range []DType{Float32, Int32, Float16, BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			srcs := reduceRanks(dt, n, uint64(dt)+7)
			want := make([]byte, n)
			es := int(dt.Size())
			for i := 0; i < n/es; i++ {
				switch dt {
				case Float32:
					acc := elems[float32](srcs[0])[i]
					for _, s := range srcs[1:] {
						acc += elems[float32](s)[i]
					}
					elems[float32](want)[i] = acc
				case Int32:
					acc := elems[int32](srcs[0])[i]
					for _, s := range srcs[1:] {
						acc += elems[int32](s)[i]
					}
					elems[int32](want)[i] = acc
				default:
					widen, narrow := F16ToFloat32, Float32ToF16
					if dt == BFloat16 {
						widen, narrow = BF16ToFloat32, Float32ToBF16
					}
					acc := widen(elems[uint16](srcs[0])[i])
					for _, s := range srcs[1:] {
						acc += widen(elems[uint16](s)[i])
					}
					elems[uint16](want)[i] = narrow(acc)
				}
			}
			dst := make([]byte, n)
			reduce(dt, dst, srcs)
			require.Equal(t, want, dst)
			reduce(dt, srcs[0], srcs) // in place, into the first rank's buffer
			require.Equal(t, want, srcs[0])
		})
	}
	negZero := make([][]byte, 2)
	for i := range negZero {
		negZero[i] = make([]byte, 8)
		elems[float32](negZero[i])[0] = float32(math.Copysign(0, -1))
	}
	dst := make([]byte, 8)
	reduce(Float32, dst, negZero)
	require.True(t, math.Signbit(float64(elems[float32](dst)[0])), "-0 + -0 is -0")
}

// BenchmarkReduce is one rank's share of a 1 MiB all-reduce on the cpu
// heap: 4 ranks summed into a fifth buffer, per element type.
func BenchmarkReduce(b *testing.B) {
	const n = 1 << 20
	for _, dt := range []DType{Float32, Int32, Float16, BFloat16} {
		b.Run(dt.String(), func(b *testing.B) {
			srcs := reduceRanks(dt, n, 1)
			dst := make([]byte, n)
			b.SetBytes(n)
			for b.Loop() {
				reduce(dt, dst, srcs)
			}
		})
	}
}
