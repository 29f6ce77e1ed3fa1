package alloc

import "testing"

func TestSizeClassBoundsWasteAndIndex(t *testing.T) {
	seen := map[int]int64{}
	for _, n := range []int64{1, 255, 256, 257, 300, 511, 512, 513, 4095, 4096, 65535, 65536, 65537, 1 << 20, 3<<20 + 1, 16 << 20, 16<<20 + 1, 100 << 20} {
		r, idx := sizeClass(n)
		if r < n {
			t.Fatalf("sizeClass(%d) = %d, smaller than the request", n, r)
		}
		if n > minClass && float64(r-n) > 0.125*float64(n)+1 && n <= largeLimit {
			t.Fatalf("sizeClass(%d) = %d wastes more than 12.5%%", n, r)
		}
		if idx >= numClasses {
			t.Fatalf("sizeClass(%d) index %d out of range", n, idx)
		}
		if idx >= 0 {
			if prev, ok := seen[idx]; ok && prev != r {
				t.Fatalf("class %d maps to two sizes %d and %d", idx, prev, r)
			}
			seen[idx] = r
		} else if r%largeStep != 0 {
			t.Fatalf("large size %d not rounded to %d", r, largeStep)
		}
	}
	if r, _ := sizeClass(64 << 10); r != 64<<10 {
		t.Fatalf("64 KiB must be its own class, got %d", r)
	}
}
