package memmap

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Graphs and pools by the memory they hold, largest first, equal ones by
// ID; a freed block two graphs hold counted once in what they hold
// together, and once per graph when the snapshot has no segments to tell.
func TestLargestFirst(t *testing.T) {
	s := Snapshot{
		Graphs: []GraphInfo{
			{ID: 1, OwnedBytes: 4 << 10},
			{ID: 2, OwnedBytes: 8 << 10, HeldBytes: 2 << 10},
			{ID: 3, OwnedBytes: 1 << 10, HeldBytes: 2 << 10},
			{ID: 4, OwnedBytes: 1 << 10, HeldBytes: 2 << 10, Capturing: true},
			{ID: 5, OwnedBytes: 4 << 10},
		},
		Pools: []PoolInfo{{ID: 7, Bytes: 1 << 20}, {ID: 8, Bytes: 2 << 20}, {ID: 9, Bytes: 1 << 20}},
		Segments: []Segment{{Size: 2 << 20, Kind: "small", Blocks: []Block{
			{Offset: 0, Size: 2 << 10, State: BlockHeldForGraph, Graphs: []int{2, 3, 4}},
			{Offset: 2 << 10, Size: 8 << 10, State: BlockLive},
		}}},
	}
	var ids []int
	for _, g := range s.GraphsByMemory() {
		ids = append(ids, g.ID)
	}
	require.Equal(t, []int{2, 1, 5, 3, 4}, ids)
	require.Equal(t, []int{1, 2, 3, 4, 5}, []int{s.Graphs[0].ID, s.Graphs[1].ID, s.Graphs[2].ID, s.Graphs[3].ID, s.Graphs[4].ID}, "the snapshot's own order is left alone")
	ids = ids[:0]
	for _, p := range s.PoolsByBytes() {
		ids = append(ids, p.ID)
	}
	require.Equal(t, []int{8, 7, 9}, ids)

	rest := s.GraphsByMemory()[3:] // graphs 3 and 4, equal: they share the held block
	require.EqualValues(t, (1<<10)+(1<<10)+(2<<10), s.GraphsMemory(rest))
	require.EqualValues(t, (4<<10)+(8<<10)+(2<<10), s.GraphsMemory(s.Graphs[:2]))
	s.Segments = nil
	require.EqualValues(t, (1<<10)+(2<<10)+(1<<10)+(2<<10), s.GraphsMemory(rest), "without segments: each graph's held bytes")
}
