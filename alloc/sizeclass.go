package alloc

import "math/bits"

// Size classes: eight per power of two up to largeLimit (at most 12.5%
// rounding waste), then multiples of largeStep. Small classes index a fixed
// array so a pool hit costs no map lookup.
const (
	minClass   = 256
	largeLimit = 16 << 20
	largeStep  = 2 << 20
	numClasses = 1 + (24-8)*8 // class 0 is <= 256 B; 16 MiB = 2^24
)

// sizeClass returns the rounded size for n > 0 and its small-class index, or
// -1 for a large size.
func sizeClass(n int64) (int64, int) {
	if n <= minClass {
		return minClass, 0
	}
	if n > largeLimit {
		return (n + largeStep - 1) &^ (largeStep - 1), -1
	}
	p := bits.Len64(uint64(n - 1)) // 2^(p-1) < n <= 2^p, p >= 9
	shift := uint(p - 4)
	step := int64(1) << shift
	r := (n + step - 1) &^ (step - 1)
	k := int(r>>shift) - 9 // 0..7
	return r, 1 + (p-9)*8 + k
}
