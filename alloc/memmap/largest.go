package memmap

import (
	"cmp"
	"slices"
)

// The views list graphs and graph pools largest first: an engine
// captures a graph per batch size or sequence bucket, tens of them, and
// the ones that hold memory are what a reader looks for.

// Memory is what g keeps from reuse: the bytes it owns and the freed
// bytes it holds.
func (g GraphInfo) Memory() int64 { return g.OwnedBytes + g.HeldBytes }

// GraphsByMemory returns s's graphs, the capture recording among them,
// by Memory, largest first; equal ones by ID. The slice is the caller's.
func (s Snapshot) GraphsByMemory() []GraphInfo {
	gs := slices.Clone(s.Graphs)
	slices.SortStableFunc(gs, func(x, y GraphInfo) int {
		return cmp.Or(cmp.Compare(y.Memory(), x.Memory()), cmp.Compare(x.ID, y.ID))
	})
	return gs
}

// PoolsByBytes returns s's graph pools by the memory they borrowed,
// largest first; equal ones by ID. The slice is the caller's.
func (s Snapshot) PoolsByBytes() []PoolInfo {
	ps := slices.Clone(s.Pools)
	slices.SortStableFunc(ps, func(x, y PoolInfo) int {
		return cmp.Or(cmp.Compare(y.Bytes, x.Bytes), cmp.Compare(x.ID, y.ID))
	})
	return ps
}

// GraphsMemory is the memory the graphs gs own and hold together: what
// each owns (no two graphs own a byte), and each freed block one of them
// holds once, though several may hold it. The held blocks are read from
// s's segments; a snapshot without them (a metrics scrape's) sums the
// graphs' HeldBytes instead, which counts a shared block once per graph.
func (s Snapshot) GraphsMemory(gs []GraphInfo) int64 {
	in := make(map[int]bool, len(gs))
	var n, held int64
	for _, g := range gs {
		in[g.ID] = true
		n += g.OwnedBytes
		held += g.HeldBytes
	}
	if len(s.Segments) == 0 {
		return n + held
	}
	for _, seg := range s.Segments {
		for _, blk := range seg.Blocks {
			if blk.State == BlockHeldForGraph && slices.ContainsFunc(blk.Graphs, func(id int) bool { return in[id] }) {
				n += blk.Size
			}
		}
	}
	return n
}
