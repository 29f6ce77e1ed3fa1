package alloc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// orderStep allocates a step's temporaries at batch n (n MiB, n/2, n/4)
// and a 64 KiB output after them, frees the temporaries and returns the
// output: a graph's output stays the graph's.
func orderStep(a *alloc.Allocator, n int64) (alloc.Buffer, error) {
	var tmp []alloc.Buffer
	for _, size := range []int64{n << 20, n << 19, n << 18} {
		b, err := a.Alloc(size)
		if err != nil {
			return alloc.Buffer{}, err
		}
		tmp = append(tmp, b)
	}
	out, err := a.Alloc(64 << 10)
	if err != nil {
		return alloc.Buffer{}, err
	}
	for _, b := range tmp {
		if err := a.Free(b); err != nil {
			return alloc.Buffer{}, err
		}
	}
	return out, nil
}

// Graphs captured into one pool smallest first, after one eager step at
// the largest batch, cost what they cost largest first: at most 1.1x the
// largest graph. The pool takes wholly free segments of about a large
// request's size whole, and small segments from the high end of segments
// already in use, so neither the separate segments of the warm-up nor
// the graphs' outputs leave the pool pieces that never merge.
func TestGraphPoolSmallestFirstCostsTheLargest(t *testing.T) {
	const batches = 64
	graphBytes := func(up bool, lo int64) int64 {
		_, a := newCPUAllocator(t, 8<<30)
		warm, err := orderStep(a, batches)
		require.NoError(t, err)
		require.NoError(t, a.Free(warm))
		gp := a.NewGraphPool()
		r0 := a.Stats().BytesReserved
		var gs []*alloc.Graph
		for i := int64(batches); i >= lo; i-- {
			n := i
			if up {
				n = batches + lo - i
			}
			g, err := a.WithCapture(alloc.CaptureOptions{Pool: gp}, func() error { _, err := orderStep(a, n); return err })
			require.NoError(t, err)
			gs = append(gs, g)
		}
		cost := gp.Bytes() + a.Stats().BytesReserved - r0
		for _, g := range gs {
			require.NoError(t, g.Close())
		}
		require.NoError(t, gp.Close())
		require.NoError(t, a.Close())
		return cost
	}
	largest := graphBytes(false, batches)
	down, up := graphBytes(false, 1), graphBytes(true, 1)
	t.Logf("largest graph %d MiB; pool largest first %.3fx, smallest first %.3fx", largest>>20, float64(down)/float64(largest), float64(up)/float64(largest))
	require.LessOrEqual(t, float64(down), 1.1*float64(largest))
	require.LessOrEqual(t, float64(up), 1.1*float64(largest))
}
