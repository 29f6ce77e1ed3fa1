package alloc_test

import (
	"math"
	"math/rand/v2"

	"github.com/capalloc/capalloc/alloc"
)

// poolTrace is a reproducible allocation workload: each op allocates into
// an empty slot (size > 0) or frees a live one (size 0); sizes are
// log-uniform in [min, max]; an op allocates with probability
// 1 - live/(2·target), so about target buffers are live. After the n ops
// the trace frees what is left, so every run starts and ends empty.
type poolTrace struct {
	ops   []traceOp
	slots int
}

type traceOp struct {
	size int64
	slot int
}

func newPoolTrace(n, target int, min, max int64, seed uint64) poolTrace {
	return newTrace(n, target, seed, logUniform(min, max))
}

// logUniform draws sizes log-uniform in [min, max].
func logUniform(min, max int64) func(*rand.Rand) int64 {
	lo, hi := math.Log(float64(min)), math.Log(float64(max))
	return func(rng *rand.Rand) int64 { return int64(math.Exp(lo + rng.Float64()*(hi-lo))) }
}

// newInferenceTrace is the second fragmentation trace (issue 23, item
// 4): an inference engine's mix, where most requests are small. 80% of the
// sizes are log-uniform in [512 B, 1 MiB) (activations, small tensors),
// 20% log-uniform in [1 MiB, 128 MiB] (KV-cache blocks, weights'
// scratch), about 128 live, seed 2.
func newInferenceTrace(n int) poolTrace {
	small, large := logUniform(512, 1<<20-1), logUniform(1<<20, 128<<20)
	return newTrace(n, 128, 2, func(rng *rand.Rand) int64 {
		if rng.IntN(10) < 8 {
			return small(rng)
		}
		return large(rng)
	})
}

// newTrace makes a trace of n ops, about target live, sizes from size.
func newTrace(n, target int, seed uint64, size func(*rand.Rand) int64) poolTrace {
	rng := rand.New(rand.NewPCG(seed, 0))
	slots := 2 * target
	var free, used []int
	for i := slots - 1; i >= 0; i-- {
		free = append(free, i)
	}
	tr := poolTrace{ops: make([]traceOp, 0, n), slots: slots}
	for len(tr.ops) < n {
		if len(used) == 0 || (len(free) > 0 && rng.IntN(slots) >= len(used)) {
			s := free[len(free)-1]
			free = free[:len(free)-1]
			used = append(used, s)
			tr.ops = append(tr.ops, traceOp{size: size(rng), slot: s})
			continue
		}
		k := rng.IntN(len(used))
		s := used[k]
		used[k] = used[len(used)-1]
		used = used[:len(used)-1]
		free = append(free, s)
		tr.ops = append(tr.ops, traceOp{slot: s})
	}
	for _, s := range used {
		tr.ops = append(tr.ops, traceOp{slot: s})
	}
	return tr
}

// run plays the trace once on a; live (tr.slots long) holds the buffers
// while it runs.
func (tr poolTrace) run(a *alloc.Allocator, live []alloc.Buffer) error {
	return tr.runChecked(a, live, nil)
}

// runChecked is run calling check after every op.
func (tr poolTrace) runChecked(a *alloc.Allocator, live []alloc.Buffer, check func(i int) error) error {
	for i, op := range tr.ops {
		if check != nil && i > 0 {
			if err := check(i - 1); err != nil {
				return err
			}
		}
		if op.size == 0 {
			if err := a.Free(live[op.slot]); err != nil {
				return err
			}
			live[op.slot] = alloc.Buffer{}
			continue
		}
		b, err := a.Alloc(op.size)
		if err != nil {
			return err
		}
		live[op.slot] = b
	}
	return nil
}
