package symheap

import (
	"fmt"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
)

// reduceChunk is how many elements reduce sums at a time in a stack
// accumulator: small enough for the stack, large enough that the loop
// over ranks is a loop over vectors.
const reduceChunk = 1024

// reduce writes into dst the element-wise sum of srcs, in rank order
// (srcs[0] first), summed in float32 for the float types (halves rounded
// once, to nearest even) and wrapping for int32: the device kernels'
// arithmetic. The sum starts from srcs[0]'s values, not from +0: -0 + -0
// is -0, and +0 + -0 would turn it into +0. dst may be one of srcs.
func reduce(dt DType, dst []byte, srcs [][]byte) {
	es := int(dt.Size())
	n := len(dst) / es
	for lo := 0; lo < n; lo += reduceChunk {
		hi := min(lo+reduceChunk, n)
		switch dt {
		case Int32:
			var acc [reduceChunk]int32
			a := acc[:hi-lo]
			copy(a, elems[int32](srcs[0][lo*es:hi*es]))
			for _, s := range srcs[1:] {
				addInto(a, elems[int32](s[lo*es:hi*es]))
			}
			copy(elems[int32](dst[lo*es:hi*es]), a)
		case Float32:
			var acc [reduceChunk]float32
			a := acc[:hi-lo]
			copy(a, elems[float32](srcs[0][lo*es:hi*es]))
			for _, s := range srcs[1:] {
				addInto(a, elems[float32](s[lo*es:hi*es]))
			}
			copy(elems[float32](dst[lo*es:hi*es]), a)
		default:
			var acc [reduceChunk]float32
			a := acc[:hi-lo]
			widen := F16ToFloat32
			narrow := Float32ToF16
			if dt == BFloat16 {
				widen, narrow = BF16ToFloat32, Float32ToBF16
			}
			for p, s := range srcs {
				v := elems[uint16](s[lo*es : hi*es])
				v = v[:len(a)]
				if p == 0 {
					for i := range a {
						a[i] = widen(v[i])
					}
					continue
				}
				for i := range a {
					a[i] += widen(v[i])
				}
			}
			out := elems[uint16](dst[lo*es : hi*es])
			out = out[:len(a)]
			for i := range a {
				out[i] = narrow(a[i])
			}
		}
	}
}

// addInto adds v into a, element-wise (len(v) >= len(a)).
func addInto[T float32 | int32](a, v []T) {
	v = v[:len(a)]
	for i := range a {
		a[i] += v[i]
	}
}

// elems views b as elements of T.
func elems[T float32 | int32 | uint16](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(T(0))))
}

func checkAlgorithm(alg Algorithm) error {
	if alg < Auto || alg > TwoShot {
		return fmt.Errorf("%w: symheap: all-reduce algorithm %v", alloc.ErrInvalidValue, alg)
	}
	return nil
}
