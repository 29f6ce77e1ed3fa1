package alloc

import (
	"math/rand/v2"
	"testing"
)

// Buckets are contiguous half-open size ranges in increasing order, at
// most 6.25% wide above 8 KiB, and every bucket index is in range.
func TestBucketOfIsMonotonicAndFine(t *testing.T) {
	prev, start := bucketOf(poolGranule), int64(poolGranule)
	step := func(n int64) int64 { return max(poolGranule, n>>7&^(poolGranule-1)) }
	for n := int64(poolGranule); n <= 1<<40; n += step(n) {
		b := bucketOf(n)
		if b < prev || b > prev+1 || b >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d", n, b, prev)
		}
		if b != prev {
			if w := n - start; n > linearMax && float64(w) > 0.0625*float64(start)+2*float64(step(n)) { // sampled every step(n)
				t.Fatalf("bucket %d spans [%d, %d): wider than 6.25%%", prev, start, n)
			}
			prev, start = b, n
		}
	}
}

// find returns a block of at least the size asked for, and the smallest
// one when an exact or a same-bucket fit exists; nothing when no block is
// large enough.
func TestFitIndexFindsSmallestFit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 0))
	var x fitIndex
	var all []*block
	for i := 0; i < 300; i++ {
		b := &block{class: (1 + rng.Int64N(1<<15)) * poolGranule}
		x.insert(b)
		all = append(all, b)
	}
	for i := 0; i < 2000; i++ {
		n := (1 + rng.Int64N(1<<15)) * poolGranule
		var best *block
		for _, b := range all {
			if b.class >= n && (best == nil || b.class < best.class) {
				best = b
			}
		}
		got := x.find(n)
		switch {
		case best == nil && got != nil:
			t.Fatalf("find(%d) = %d, but no block fits", n, got.class)
		case best != nil && got == nil:
			t.Fatalf("find(%d) = nil, but %d fits", n, best.class)
		case got != nil && got.class < n:
			t.Fatalf("find(%d) = %d: too small", n, got.class)
		case got != nil && bucketOf(got.class) != bucketOf(best.class) && bucketOf(best.class) == bucketOf(n):
			t.Fatalf("find(%d) = %d although %d fits in the request's own bucket", n, got.class, best.class)
		}
		if i%3 == 0 && got != nil { // take some out, as the pool does
			x.remove(got)
			for k, b := range all {
				if b == got {
					all = append(all[:k], all[k+1:]...)
					break
				}
			}
		}
	}
}
