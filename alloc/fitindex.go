package alloc

import "math/bits"

// fitIndex finds a free block for a request in about O(1): free blocks sit
// in buckets by size, sixteen per power of two (6.25% apart), each an
// intrusive LIFO list, with a bitmap of the non-empty buckets (the TLSF
// layout). A search looks at the request's own bucket first, taking the
// smallest block there that fits, then at the next non-empty bucket above,
// every block of which fits (buckets are half-open ranges, so only the
// request's own can hold smaller blocks). The result is within one bucket
// of best fit, with no allocation and no tree to rebalance.
type fitIndex struct {
	heads    [numBuckets]*block
	nonEmpty [(numBuckets + 63) / 64]uint64
}

const (
	subBits    = 4 // sixteen buckets per power of two
	linearMax  = 1 << (subBits + granBits)
	granBits   = 9 // sizes are multiples of 512 B (poolGranule)
	numBuckets = (1 << subBits) * (64 - subBits - granBits)

	// scanLimit bounds the walk of one bucket's list for the best fit.
	scanLimit = 8
)

// bucketOf is the bucket whose sizes include n: n/512 below 8 KiB, then
// sixteen equal steps per power of two.
func bucketOf(n int64) int {
	if n < linearMax {
		return int(n >> granBits)
	}
	fl := bits.Len64(uint64(n)) - 1 // 2^fl <= n < 2^(fl+1)
	sl := int(uint64(n)>>(fl-subBits)) & (1<<subBits - 1)
	return (fl-subBits-granBits+1)<<subBits + sl
}

func (x *fitIndex) insert(b *block) {
	i := bucketOf(b.class)
	b.bucket = int32(i)
	b.freePrev, b.freeNext = nil, x.heads[i]
	if b.freeNext != nil {
		b.freeNext.freePrev = b
	}
	x.heads[i] = b
	x.nonEmpty[i>>6] |= 1 << (i & 63)
}

func (x *fitIndex) remove(b *block) {
	i := int(b.bucket)
	if b.freePrev != nil {
		b.freePrev.freeNext = b.freeNext
	} else {
		x.heads[i] = b.freeNext
		if b.freeNext == nil {
			x.nonEmpty[i>>6] &^= 1 << (i & 63)
		}
	}
	if b.freeNext != nil {
		b.freeNext.freePrev = b.freePrev
	}
	b.freePrev, b.freeNext = nil, nil
}

// find returns a free block of at least n bytes, nil when there is none.
// It does not remove it.
func (x *fitIndex) find(n int64) *block {
	lo := bucketOf(n) // holds sizes both below and above n
	if best := smallestFit(x.heads[lo], n); best != nil {
		return best
	}
	if i := x.nextNonEmpty(lo + 1); i >= 0 { // every size above lo fits
		return smallestFit(x.heads[i], n)
	}
	return nil
}

// smallestFit returns the smallest block of at least n bytes among the
// first scanLimit of a list, or past those the first that fits: a bounded
// walk in the common case, and never a miss when the list holds a fit.
func smallestFit(b *block, n int64) *block {
	var best *block
	for k := 0; b != nil && (k < scanLimit || best == nil); b, k = b.freeNext, k+1 {
		if b.class >= n && (best == nil || b.class < best.class) {
			best = b
			if b.class == n {
				break
			}
		}
	}
	return best
}

// nextNonEmpty returns the first non-empty bucket at or above i, or -1.
func (x *fitIndex) nextNonEmpty(i int) int {
	for w := i >> 6; w < len(x.nonEmpty); w++ {
		m := x.nonEmpty[w]
		if w == i>>6 {
			m &= ^uint64(0) << (i & 63)
		}
		if m != 0 {
			return w<<6 + bits.TrailingZeros64(m)
		}
	}
	return -1
}
