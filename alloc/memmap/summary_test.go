package memmap_test

import (
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc/memmap"
)

// SizeText writes binary units with two decimals, PyTorch's way.
func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB",
		6 << 20: "6.00 MiB", 3 << 29: "1.50 GiB", 1 << 62: "4.00 EiB", -2048: "-2.00 KiB",
	} {
		if got := memmap.SizeText(n); got != want {
			t.Errorf("SizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

// Fragmentation is reserved over in use, 0 when nothing is in use.
func TestFragmentation(t *testing.T) {
	if f := (memmap.Stats{BytesReserved: 3 << 20, BytesInUse: 2 << 20}).Fragmentation(); f != 1.5 {
		t.Errorf("3 MiB reserved for 2 MiB in use: %v, want 1.5", f)
	}
	if f := (memmap.Stats{BytesReserved: 3 << 20}).Fragmentation(); f != 0 {
		t.Errorf("nothing in use: %v, want 0", f)
	}
}

// Summary sums blocks by state and pool; a segment of a kind with no
// column counts in the total only; the largest free block is the largest
// free or cached one; names are quoted, so no control character reaches
// the text.
func TestSnapshotSummary(t *testing.T) {
	free := int64(5 << 20)
	s := memmap.Snapshot{
		Allocator: "a\x01b", Backend: "cpu", Device: "dev", DeviceMemory: 8 << 20, DeviceFree: &free,
		Stats: memmap.Stats{BytesInUse: 1 << 20, BytesReserved: 3 << 20, OutOfMemory: 2, ReclaimRetries: 5},
		Segments: []memmap.Segment{
			{Kind: "small", Size: 2 << 20, Blocks: []memmap.Block{
				{Size: 1 << 20, State: memmap.BlockLive}, {Offset: 1 << 20, Size: 1 << 20, State: memmap.BlockCachedFragment}}},
			{Kind: "large", Size: 512 << 10, Blocks: []memmap.Block{{Size: 512 << 10, State: memmap.BlockCachedSegment}}},
			{Kind: "future", Size: 512 << 10, Blocks: []memmap.Block{{Size: 512 << 10, State: memmap.BlockLive}}},
		},
	}
	text := s.Summary()
	squashed := strings.Join(strings.Fields(text), " ") // the table's padding aside
	for _, want := range []string{
		`allocator "a\x01b", backend "cpu", device "dev": 8.00 MiB total, 5.00 MiB free`,
		"live 1.00 MiB 0 B 0 B 0 B 0 B 1.50 MiB", // the future segment in the total only
		"cached-segment 0 B 512.00 KiB 0 B 0 B 0 B 512.00 KiB",
		"cached (both states) 1.00 MiB 512.00 KiB 0 B 0 B 0 B 1.50 MiB",
		"segments 1 1 0 0 - 3",
		"out-of-memory errors 2, reclaim retries 5",
		"largest free block 1.00 MiB",
		"fragmentation outside graphs (reserved / in use, the 0 B graphs hold left out) 3.00",
	} {
		if !strings.Contains(squashed, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
	if strings.ContainsRune(text, '\x01') {
		t.Errorf("a control character reached the text:\n%s", text)
	}
}

// A graph pool's blocks count in a column of their own, whatever segment
// they lie in; pools and graphs get a row each, named; fragmentation
// leaves the graphs' memory out of both terms and says how much that is.
func TestSummaryGraphsAndPools(t *testing.T) {
	s := memmap.Snapshot{
		Stats: memmap.Stats{BytesInUse: 1<<20 + 4096, BytesReserved: 6 << 20},
		Bytes: map[memmap.BlockState]int64{memmap.BlockLive: 1 << 20, memmap.BlockGraphOwned: 1 << 20, memmap.BlockGraphPool: 1 << 20, memmap.BlockCachedSegment: 3 << 20},
		Segments: []memmap.Segment{
			{Kind: "small", Size: 3 << 20, Blocks: []memmap.Block{
				{Size: 1 << 20, State: memmap.BlockLive},
				{Offset: 1 << 20, Size: 1 << 20, State: memmap.BlockGraphOwned, Pool: 3, Graph: 12},
				{Offset: 2 << 20, Size: 1 << 20, State: memmap.BlockGraphPool, Pool: 3}}},
			{Kind: "large", Size: 3 << 20, Blocks: []memmap.Block{{Size: 3 << 20, State: memmap.BlockCachedSegment}}},
		},
		Pools:      []memmap.PoolInfo{{ID: 3, Name: "decode", Bytes: 2 << 20, Borrowed: 1, FreeBytes: 1 << 20, FreeBlocks: 1, Graphs: []int{12}}},
		Graphs:     []memmap.GraphInfo{{ID: 12, Name: "batch-8", Pool: 3, OwnedBytes: 1 << 20, OwnedBlocks: 1, Launches: 7}, {ID: 13, Capturing: true}},
		GraphInUse: 4096,
	}
	text := s.Summary()
	squashed := strings.Join(strings.Fields(text), " ")
	for _, want := range []string{
		"graph-owned 0 B 0 B 0 B 0 B 1.00 MiB 1.00 MiB",
		"graph-pool 0 B 0 B 0 B 0 B 1.00 MiB 1.00 MiB",
		"held by graphs 2.00 MiB",
		`graph pools bytes free borrowed blocks graphs decode (pool 3) 2.00 MiB 1.00 MiB 1 1`,
		`batch-8 (graph 12) decode (pool 3) 1.00 MiB 0 B 0 B 7`,
		`graph 13 (recording) - 0 B 0 B 0 B 0`,
		// (6 MiB - 2 MiB) over (1 MiB + 4 KiB - 4 KiB)
		"fragmentation outside graphs (reserved / in use, the 2.00 MiB graphs hold left out) 4.00",
	} {
		if !strings.Contains(squashed, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
}
