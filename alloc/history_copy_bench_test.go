package alloc

import (
	"strconv"
	"testing"
)

// What the history's lock is held for when a view reads it, in a ring
// of 200,000 events: the copy of its window (into memory grown before the
// lock is taken), for the views' default window, their cap, and the whole
// ring; "whole+alloc" is the whole ring into new memory, as a reader
// that allocates under the lock would hold it.
func BenchmarkHistoryWindowCopy(b *testing.B) {
	h := &history{ring: make([]event, 200_000)}
	for i := range 3 * len(h.ring) / 2 { // wrapped
		h.record(evAlloc, 0, int64(i), tagLive, "")
	}
	for _, n := range []int{10_000, 100_000, 200_000} {
		buf := make([]event, n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n) * int64(historyEventBytes))
			for i := 0; i < b.N; i++ {
				buf = h.copyOut(buf, n).events
			}
		})
	}
	b.Run("whole+alloc", func(b *testing.B) {
		b.SetBytes(int64(len(h.ring)) * int64(historyEventBytes))
		for i := 0; i < b.N; i++ {
			_ = h.copyOut(nil, -1)
		}
	})
}
