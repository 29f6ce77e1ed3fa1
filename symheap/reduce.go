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
// arithmetic. dst may be one of srcs.
func reduce(dt DType, dst []byte, srcs [][]byte) {
	es := int(dt.Size())
	n := len(dst) / es
	for lo := 0; lo < n; lo += reduceChunk {
		hi := min(lo+reduceChunk, n)
		if dt == Int32 {
			var acc [reduceChunk]int32
			a := acc[:hi-lo]
			for _, s := range srcs {
				for i, v := range elems[int32](s[lo*es : hi*es]) {
					a[i] += v
				}
			}
			copy(elems[int32](dst[lo*es:hi*es]), a)
			continue
		}
		var acc [reduceChunk]float32
		a := acc[:hi-lo]
		for _, s := range srcs {
			switch dt {
			case Float32:
				for i, v := range elems[float32](s[lo*es : hi*es]) {
					a[i] += v
				}
			case Float16:
				for i, v := range elems[uint16](s[lo*es : hi*es]) {
					a[i] += F16ToFloat32(v)
				}
			case BFloat16:
				for i, v := range elems[uint16](s[lo*es : hi*es]) {
					a[i] += BF16ToFloat32(v)
				}
			}
		}
		switch dt {
		case Float32:
			copy(elems[float32](dst[lo*es:hi*es]), a)
		case Float16:
			for i, v := range a {
				elems[uint16](dst[lo*es : hi*es])[i] = Float32ToF16(v)
			}
		case BFloat16:
			for i, v := range a {
				elems[uint16](dst[lo*es : hi*es])[i] = Float32ToBF16(v)
			}
		}
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
