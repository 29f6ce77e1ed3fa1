package allocview

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
	"github.com/capalloc/capalloc/cpu"
)

// The chart's stack adds up: at every point drawn, the sites' bytes sum
// to the allocator's bytes in use, also when the ring has dropped the
// allocations of buffers still live ("before the oldest event kept") and
// when there are more sites than drawn apart and more events than
// columns.
func TestTimelineSumsToInUse(t *testing.T) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 256 << 20})
	require.NoError(t, err)
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{History: 300})
	require.NoError(t, err)
	defer a.Close()
	var keep []alloc.Buffer
	sites := []func(int64) (alloc.Buffer, error){ // a dozen call sites: more than maxSites
		func(n int64) (alloc.Buffer, error) { return a.Alloc(n) }, func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 1) },
		func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 2) }, func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 3) },
		func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 4) }, func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 5) },
		func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 6) }, func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 7) },
		func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 8) }, func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 9) },
		func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 10) }, func(n int64) (alloc.Buffer, error) { return a.Alloc(n + 11) },
	}
	for i := range 400 {
		b, err := sites[i%len(sites)](int64(4<<10) * int64(1+i%7))
		require.NoError(t, err)
		if i%5 == 0 {
			keep = append(keep, b) // live across the ring's wrap
		} else {
			require.NoError(t, a.Free(b))
		}
	}
	var buf bytes.Buffer
	require.NoError(t, a.WriteHistory(&buf))
	var h memmap.History
	require.NoError(t, json.Unmarshal(buf.Bytes(), &h))
	require.Len(t, h.Events, 300)

	for _, columns := range []int{1000, 37} {
		tl := newTimeline(h, columns)
		require.Len(t, tl.points, min(columns, len(h.Events)))
		require.Len(t, tl.sites, maxSites+2, "the largest sites, the others, and those before the window")
		for k, i := range tl.points {
			var sum int64
			for _, s := range tl.sites {
				require.GreaterOrEqual(t, s.values[k], int64(0), "%s at event %d", s.label, i)
				sum += s.values[k]
			}
			require.Equal(t, h.Events[i].InUse, sum, "point %d, event %d", k, i)
			require.Equal(t, h.Events[i].Reserved, tl.reserved[k])
		}
	}
	for _, b := range keep {
		require.NoError(t, a.Free(b))
	}
}
