package conformance

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/symheap"
)

// oddLayouts: every collective, and Axpy, on every layout the API
// accepts. A reduce-scatter of halves with an odd count per
// chunk starts rank r's chunk 2 bytes past a 4-byte boundary; a
// hand-written Tensor may start at any byte. A kernel that moved these
// with 16-byte or 4-byte accesses would fault on a GPU (misaligned
// address), and the fakes fail such an access too; each result is checked
// against a reference computed here.
func (s *suite) oddLayouts(t *testing.T, kind heapKind) {
	const n = 3
	w, ok := kind.open(s, t, n, 1<<18, 10*time.Second, false)
	if !ok {
		return
	}
	for _, dt := range []symheap.DType{symheap.Float16, symheap.BFloat16} {
		for _, count := range []int{1, 7, 1001} {
			t.Run(fmt.Sprintf("reduce_scatter/%s/%d_per_chunk", dt, count), func(t *testing.T) {
				layoutCase(t, w, n, 0, layoutReduceScatter(dt, count))
			})
		}
	}
	for _, shift := range []int64{1, 2, 4, 8} {
		cases := []layoutOp{layoutAllGather(37), layoutAllToAll(37), layoutAxpy(37)}
		for _, dt := range everyDType {
			cases = append(cases, layoutReduceScatter(dt, 37))
			for _, alg := range []symheap.Algorithm{symheap.OneShot, symheap.TwoShot} {
				cases = append(cases, layoutAllReduce(dt, alg, 37))
			}
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("offset_%d/%s", shift, c.name), func(t *testing.T) { layoutCase(t, w, n, shift, c) })
		}
	}
}

// layoutOp is one operation on in and out of the sizes it names.
type layoutOp struct {
	name      string
	sizes     func(n int) (in, out int64)
	input     func(r int, b []byte) // rank r's in
	run       func(h symheap.Collectives, in, out symheap.Tensor) error
	reference func(n, r int, ins [][]byte, out []byte) // rank r's out from every rank's in
}

// layoutVal is element i of rank r: a small multiple of 1/4, exact in
// every type and in any sum of a few (as in reductions).
func layoutVal(dt symheap.DType, r, i int) float32 {
	if dt == symheap.Int32 {
		return float32((r*37+i*11)%61 - 30)
	}
	return float32((r*37+i*11)%61-30) / 4
}

func layoutElems(dt symheap.DType, r int, b []byte) {
	es := int(dt.Size())
	for i := range len(b) / es {
		encodeElem(dt, b[i*es:], layoutVal(dt, r, i))
	}
}

// layoutSum writes the rank-order sum of element i over ranks of the
// values at elements first+i.
func layoutSum(dt symheap.DType, n, first int, out []byte) {
	es := int(dt.Size())
	for i := range len(out) / es {
		var s float32
		for p := range n {
			s += layoutVal(dt, p, first+i)
		}
		encodeElem(dt, out[i*es:], s)
	}
}

func layoutBytes(r int, b []byte) {
	for i := range b {
		b[i] = byte(r*31 + i*7 + 1)
	}
}

func layoutAllReduce(dt symheap.DType, alg symheap.Algorithm, count int) layoutOp {
	size := int64(count) * dt.Size()
	return layoutOp{
		name:      fmt.Sprintf("all_reduce/%s/%s", dt, alg),
		sizes:     func(int) (int64, int64) { return size, 0 },
		input:     func(r int, b []byte) { layoutElems(dt, r, b) },
		run:       func(h symheap.Collectives, in, _ symheap.Tensor) error { return h.AllReduceWith(in, dt, alg) },
		reference: func(n, _ int, _ [][]byte, out []byte) { layoutSum(dt, n, 0, out) },
	}
}

func layoutReduceScatter(dt symheap.DType, count int) layoutOp {
	chunk := int64(count) * dt.Size()
	return layoutOp{
		name:      fmt.Sprintf("reduce_scatter/%s", dt),
		sizes:     func(n int) (int64, int64) { return int64(n) * chunk, chunk },
		input:     func(r int, b []byte) { layoutElems(dt, r, b) },
		run:       func(h symheap.Collectives, in, out symheap.Tensor) error { return h.ReduceScatter(in, out, dt) },
		reference: func(n, r int, _ [][]byte, out []byte) { layoutSum(dt, n, r*count, out) },
	}
}

func layoutAllGather(chunk int64) layoutOp {
	return layoutOp{
		name:  "all_gather",
		sizes: func(n int) (int64, int64) { return chunk, int64(n) * chunk },
		input: layoutBytes,
		run:   func(h symheap.Collectives, in, out symheap.Tensor) error { return h.AllGather(in, out) },
		reference: func(n, _ int, ins [][]byte, out []byte) {
			for p := range n {
				copy(out[int64(p)*chunk:], ins[p])
			}
		},
	}
}

func layoutAllToAll(chunk int64) layoutOp {
	return layoutOp{
		name:  "all_to_all",
		sizes: func(n int) (int64, int64) { return int64(n) * chunk, int64(n) * chunk },
		input: layoutBytes,
		run:   func(h symheap.Collectives, in, out symheap.Tensor) error { return h.AllToAll(in, out) },
		reference: func(n, r int, ins [][]byte, out []byte) {
			for p := range n {
				copy(out[int64(p)*chunk:], ins[p][int64(r)*chunk:int64(r+1)*chunk])
			}
		},
	}
}

// layoutAxpy: out = 2*in + out, locally; out starts as rank r's in.
func layoutAxpy(count int) layoutOp {
	size := int64(count) * 4
	return layoutOp{
		name:  "axpy",
		sizes: func(int) (int64, int64) { return size, size },
		input: func(r int, b []byte) { layoutElems(symheap.Float32, r, b) },
		run: func(h symheap.Collectives, in, out symheap.Tensor) error {
			if err := h.CopyLocal(out, in); err != nil {
				return err
			}
			return h.Axpy(out, in, 2)
		},
		reference: func(_, r int, _ [][]byte, out []byte) {
			for i := range count {
				binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(3*layoutVal(symheap.Float32, r, i)))
			}
		},
	}
}

// layoutCase runs c on every rank with in and out at shift bytes past
// allocations of the heap, and compares every rank's out (in, for an
// in-place op) with the reference.
func layoutCase(t *testing.T, w *world, n int, shift int64, c layoutOp) {
	inSize, outSize := c.sizes(n)
	in := w.alloc(t, inSize+shift)
	in = symheap.Tensor{Off: in.Off + shift, Size: inSize}
	out := in
	if outSize > 0 {
		o := w.alloc(t, outSize+shift)
		out = symheap.Tensor{Off: o.Off + shift, Size: outSize}
	}
	t.Cleanup(func() {
		for _, h := range w.heaps {
			require.NoError(t, h.Reset())
		}
	})
	ins := make([][]byte, n)
	ios := make([]*rankIO, n)
	for r, h := range w.heaps {
		io, err := newRankIO(h.Allocator(), inSize, out.Size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, io.close()) })
		c.input(r, io.in.Bytes())
		ins[r] = bytes.Clone(io.in.Bytes())
		ios[r] = io
	}
	w.must(t, func(r int, h symheap.Collectives) error {
		if err := h.Write(in, ios[r].in, 0); err != nil {
			return err
		}
		if err := c.run(h, in, out); err != nil {
			return err
		}
		if err := h.Read(ios[r].out, 0, out); err != nil {
			return err
		}
		return h.Synchronize()
	})
	for r := range n {
		want := make([]byte, out.Size)
		c.reference(n, r, ins, want)
		require.Equal(t, want, ios[r].out.Bytes(), "rank %d: %s at offset %d", r, c.name, in.Off)
	}
}
