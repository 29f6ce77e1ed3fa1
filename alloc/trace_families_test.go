package alloc_test

import (
	"maps"
	"math/rand/v2"
	"slices"
)

// sizeFamily is one kind of buffer of a trace: how often it is asked for,
// its sizes and its mean lifetime in trace ops (exponential).
type sizeFamily struct {
	weight int
	size   func(*rand.Rand) int64
	life   float64
}

// newFamiliesTrace is the third fragmentation trace: n ops of several size
// families with lifetimes mixed, short and long, seed 3: activations
// (512 B to 64 KiB, short), scratch (1 to 8 MiB, short), KV-cache blocks
// (2 MiB each, long), large temporaries (16 to 128 MiB, short) and small
// long-lived pieces (64 KiB to 1 MiB). About 1,000 buffers live, peak in
// use about 1.4 GiB.
func newFamiliesTrace(n int) poolTrace {
	fams := []sizeFamily{
		{50, logUniform(512, 64<<10), 30},
		{20, logUniform(1<<20, 8<<20), 60},
		{15, func(*rand.Rand) int64 { return 2 << 20 }, 4000},
		{10, logUniform(16<<20, 128<<20), 15},
		{5, logUniform(64<<10, 1<<20), 8000},
	}
	total := 0
	for _, f := range fams {
		total += f.weight
	}
	rng := rand.New(rand.NewPCG(3, 0))
	var tr poolTrace
	var free []int
	due := map[int][]int{} // op index: slots freed then
	for t := 0; len(tr.ops) < n; t++ {
		for _, s := range due[t] {
			tr.ops = append(tr.ops, traceOp{slot: s})
			free = append(free, s)
		}
		delete(due, t)
		w := rng.IntN(total)
		f := fams[0]
		for _, f = range fams {
			if w < f.weight {
				break
			}
			w -= f.weight
		}
		s := tr.slots
		if len(free) > 0 {
			s, free = free[len(free)-1], free[:len(free)-1]
		} else {
			tr.slots++
		}
		tr.ops = append(tr.ops, traceOp{size: f.size(rng), slot: s})
		end := t + 1 + int(rng.ExpFloat64()*f.life)
		due[end] = append(due[end], s)
	}
	ends := slices.Sorted(maps.Keys(due)) // what is left, freed at the end in order
	for _, t := range ends {
		for _, s := range due[t] {
			tr.ops = append(tr.ops, traceOp{slot: s})
		}
	}
	return tr
}

// fencedCycles is how many cycles newFencedTrace has.
const fencedCycles = 200

// newFencedTrace is the pattern of pytorch/pytorch#123548, repeated
// fencedCycles times (seed 4): large buffers (three of 40 to 140 MiB) are
// allocated and freed, then a small one (2 to 8 MiB) is allocated after
// them and kept alive for the next 8 cycles. A caching allocator that
// carves the small one out of a freed large block fences that block's
// segment; when the next cycle's large ones no longer fit beside it, it
// grows reserved by a segment each cycle while in use stays flat.
func newFencedTrace() poolTrace {
	rng := rand.New(rand.NewPCG(4, 0))
	const keep = 8
	large, small := logUniform(40<<20, 140<<20), logUniform(2<<20, 8<<20)
	tr := poolTrace{slots: 3 + keep}
	for c := 0; c < fencedCycles; c++ {
		for i := 0; i < 3; i++ {
			tr.ops = append(tr.ops, traceOp{size: large(rng), slot: i})
		}
		for i := 0; i < 3; i++ {
			tr.ops = append(tr.ops, traceOp{slot: i})
		}
		s := 3 + c%keep
		if c >= keep {
			tr.ops = append(tr.ops, traceOp{slot: s}) // the one of keep cycles ago
		}
		tr.ops = append(tr.ops, traceOp{size: small(rng), slot: s})
	}
	for c := fencedCycles - keep; c < fencedCycles; c++ {
		tr.ops = append(tr.ops, traceOp{slot: 3 + c%keep})
	}
	return tr
}
