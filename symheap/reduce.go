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
	switch dt {
	case Int32:
		reduceAs[int32, int32](dst, srcs, nil, nil)
	case Float32:
		reduceAs[float32, float32](dst, srcs, nil, nil)
	case BFloat16:
		reduceAs(dst, srcs, widenBF16, narrowBF16)
	default:
		reduceAs(dst, srcs, widenF16, narrowF16)
	}
}

// reduceAs is reduce for elements of E summed in an accumulator of A, a
// chunk at a time. widen converts a chunk of elements to the accumulator's
// type and narrow back (the halves); nil for both sums the elements as
// they are (E is A). Each call through them converts a whole chunk, so the
// per-element work is direct calls the compiler can inline.
func reduceAs[E uint16 | int32 | float32, A int32 | float32](dst []byte, srcs [][]byte, widen func([]A, []E), narrow func([]E, []A)) {
	es := int(unsafe.Sizeof(E(0)))
	n := len(dst) / es
	var acc, wide [reduceChunk]A
	for lo := 0; lo < n; lo += reduceChunk {
		hi := min(lo+reduceChunk, n)
		a, w := acc[:hi-lo], wide[:hi-lo]
		chunk := func(b []byte) []byte { return b[lo*es : hi*es] }
		if widen == nil {
			copy(a, elems[A](chunk(srcs[0])))
			for _, s := range srcs[1:] {
				addInto(a, elems[A](chunk(s)))
			}
			copy(elems[A](chunk(dst)), a)
			continue
		}
		widen(a, elems[E](chunk(srcs[0])))
		for _, s := range srcs[1:] {
			widen(w, elems[E](chunk(s)))
			addInto(a, w)
		}
		narrow(elems[E](chunk(dst)), a)
	}
}

// The halves' conversions, a chunk at a time (len(src) >= len(dst)).
func widenF16(a []float32, v []uint16)   { convert(a, v, F16ToFloat32) }
func narrowF16(v []uint16, a []float32)  { convert(v, a, Float32ToF16) }
func widenBF16(a []float32, v []uint16)  { convert(a, v, BF16ToFloat32) }
func narrowBF16(v []uint16, a []float32) { convert(v, a, Float32ToBF16) }

// convert sets dst[i] to f(src[i]). Small enough to inline into the four
// above, where f is then a direct call.
func convert[S, D any](dst []D, src []S, f func(S) D) {
	for i, x := range src[:len(dst)] {
		dst[i] = f(x)
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
