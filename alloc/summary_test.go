package alloc_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/memmap"
)

// Summary's table has device memory by pool and state, the counters
// current and peak, allocations and frees, out-of-memory errors and
// retries, the largest free block and the fragmentation.
func TestSummary(t *testing.T) {
	d := newCPU(t, 64<<20)
	a, err := alloc.New(d, alloc.Options{Name: "summary"})
	require.NoError(t, err)
	small, err := a.Alloc(64 << 10) // a 2 MiB small segment
	require.NoError(t, err)
	freed, err := a.Alloc(128 << 10)
	require.NoError(t, err)
	large, err := a.Alloc(3 << 20) // a 20 MiB large segment
	require.NoError(t, err)
	syncBuf, err := a.AllocSync(5 << 10)
	require.NoError(t, err)
	_, err = a.Workspace("attn", 256<<10)
	require.NoError(t, err)
	require.NoError(t, a.Free(freed))
	_, err = a.Alloc(63 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)

	text := a.Summary()
	rows := map[string][]string{}
	cells := regexp.MustCompile(`\S+(?: \S+)*`) // cells are two spaces apart, words one
	for _, line := range strings.Split(text, "\n") {
		if c := cells.FindAllString(line, -1); len(c) > 1 {
			rows[c[0]] = c[1:]
		}
	}
	//                      small       large       sync        graph  graph pools  total
	require.Equal(t, []string{"64.00 KiB", "3.00 MiB", "5.00 KiB", "0 B", "0 B", "3.07 MiB"}, rows["live"], text)
	require.Equal(t, []string{"256.00 KiB", "0 B", "0 B", "0 B", "0 B", "256.00 KiB"}, rows["workspace"], text)
	require.Equal(t, []string{"1, 1, 1, 0, -, 3"}, []string{strings.Join(rows["segments"], ", ")}, text)
	s := a.Stats()
	require.Contains(t, text, "allocator \"summary\", backend \"cpu\"")
	require.Contains(t, text, "64.00 MiB total, ")
	require.Equal(t, []string{memmap.SizeText(s.BytesInUse), memmap.SizeText(s.PeakInUse)}, rows["in use (as requested)"], text)
	require.Contains(t, text, "out-of-memory errors 1, reclaim retries ")
	require.Contains(t, text, "largest free block 17.00 MiB", "the large segment's rest")
	require.Regexp(t, `fragmentation outside graphs \(reserved / in use, the 0 B graphs hold left out\) [0-9]+\.[0-9]{2}\n`, text)
	require.Contains(t, text, "allocations 5 (")
	require.Contains(t, text, "frees 1,")

	require.NoError(t, a.Free(small))
	require.NoError(t, a.Free(large))
	require.NoError(t, a.Free(syncBuf))
	require.NoError(t, a.ReleaseWorkspace("attn"))
	require.NoError(t, a.Close())
	require.Contains(t, a.Summary(), `allocator "summary": `)
	require.Contains(t, a.Summary(), "use after close")
}

// Summary is safe beside allocations and frees on other goroutines
// (run with -race).
func TestSummaryRaces(t *testing.T) {
	a := cpuAllocatorWith(t, 256<<20, alloc.Options{})
	wait := allocFreeWorkers(t, a, 4, 200, func(g, i int) int64 { return int64(4<<10) * int64(1+(i+g)%16) })
	for range 20 {
		require.Contains(t, a.Summary(), "device memory by pool")
	}
	wait()
}
