package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// allToAllV: symheap's AllToAllV, whose per-peer counts live in the heap
// and are read when it runs. Per element type, one step (write in, the
// send counts and a poisoned out; AllToAllV; read out and the receive
// counts) is captured once per rank and replayed with a new routing each
// time: uniform, a rank that sends nothing and one that receives nothing,
// odd counts (halves at 2-byte offsets), everything to one rank, and bad
// counts (negative, a rank's sends past its in, a rank's receives past
// its out, one of 2^62 that no check may add to) set on one rank only.
// Every byte each rank receives is compared with what its peers sent, and
// the bytes past the received total must
// keep the poison; the receive counts must be what each peer sent. A bad
// routing fails the replay on every rank with
// symheap.ErrCountsOutOfRange naming the offending rank, writes nothing
// (out keeps the poison, the receive counts the last good routing's), and
// leaves the heap usable: the next good routing's replay is exact.
func (s *suite) allToAllV(t *testing.T, kind heapKind) {
	const n = 3
	w, ok := kind.open(s, t, n, 1<<18, 10*time.Second, false)
	if !ok {
		return
	}
	t.Run("bad_operands", func(t *testing.T) { a2avBadOperands(t, w) })
	for _, dt := range everyDType {
		t.Run(dt.String(), func(t *testing.T) {
			t.Cleanup(func() {
				for _, h := range w.heaps {
					require.NoError(t, h.Reset())
				}
			})
			v := newA2AVCase(t, w, dt)
			graphs := make([]*alloc.Graph, n)
			w.must(t, func(r int, h symheap.Collectives) error {
				g, err := h.Allocator().WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return v.step(r, h) })
				graphs[r] = g
				return err
			})
			t.Cleanup(func() {
				for _, g := range graphs {
					require.NoError(t, g.Close())
				}
			})
			var last [][]int64 // the last good routing: what recvCounts keeps
			for k, rt := range a2avRoutings(n, a2avCap) {
				v.fill(k, rt.m)
				errs := w.each(func(r int, h symheap.Collectives) error {
					if err := graphs[r].Launch(); err != nil {
						return err
					}
					return h.Synchronize()
				})
				if rt.bad == "" {
					for r := range n {
						require.NoError(t, errs[r], "%s: rank %d", rt.name, r)
						v.verify(t, r, k, rt.m, rt.m)
					}
					last = rt.m
					continue
				}
				for r := range n {
					require.ErrorIs(t, errs[r], symheap.ErrCountsOutOfRange, "%s: rank %d", rt.name, r)
					require.Contains(t, errs[r].Error(), rt.bad, "%s: rank %d names the bad count", rt.name, r)
					require.NoError(t, w.heaps[r].Err(), "%s: rank %d: the heap is not broken", rt.name, r)
					v.verify(t, r, k, nil, last)
				}
			}
		})
	}
}

// a2avCap is each rank's in and out, in elements: enough that the device
// heap launches several blocks for every element type (a block serves 512
// threads of 16 bytes), so every block's copy of every segment, and its
// reading of the counts, is checked.
const a2avCap = 6000

// a2avRouting is one replay's counts (m[p][q]: p sends q) and, for bad
// ones, what every rank's error must say.
type a2avRouting struct {
	name string
	m    [][]int64
	bad  string
}

// a2avRoutings are the replays' routings over n ranks whose in and out
// hold cp elements: good and bad ones interleaved.
func a2avRoutings(n int, cp int64) []a2avRouting {
	fill := func(f func(p, q int) int64) [][]int64 {
		m := make([][]int64, n)
		for p := range m {
			m[p] = make([]int64, n)
			for q := range m[p] {
				m[p][q] = f(p, q)
			}
		}
		return m
	}
	with := func(m [][]int64, p, q int, c int64) [][]int64 { m[p][q] = c; return m }
	uniform := func(p, q int) int64 { return cp / int64(n) }
	return []a2avRouting{
		{name: "uniform", m: fill(uniform)},
		{name: "rank 1 sends nothing, rank 2 receives nothing", m: fill(func(p, q int) int64 {
			if p == 1 || q == 2 {
				return 0
			}
			return int64(3 + 5*p + q)
		})},
		{name: "negative", m: with(fill(uniform), 2, 0, -1), bad: "rank 2's send count for rank 0 is -1"},
		{name: "odd counts", m: fill(func(p, q int) int64 { return int64(1 + (7*p+3*q)%17) })},
		{name: "past a rank's in", m: with(fill(uniform), 1, 2, cp), bad: "rank 1's send count for rank 2"},
		{name: "a count no sum may overflow on", m: with(fill(uniform), 0, 1, 1<<62), bad: "rank 0's send count for rank 1 is 4611686018427387904"},
		{name: "everything to rank 0", m: fill(func(p, q int) int64 {
			if q == 0 {
				return cp / int64(n)
			}
			return 0
		})},
		{name: "past a rank's out", m: fill(func(p, q int) int64 {
			if q == 1 {
				return cp/int64(n) + 1
			}
			return 0
		}), bad: "rank 1 receives"},
		{name: "uniform again", m: fill(uniform)},
	}
}

// a2avCase is one element type's tensors (the same on every rank) and
// each rank's pinned staging.
type a2avCase struct {
	dt                  symheap.DType
	in, out, send, recv symheap.Tensor
	inB, sendB, outB    []*alloc.HostBuffer
	recvB, poison       []*alloc.HostBuffer
}

func newA2AVCase(t *testing.T, w *world, dt symheap.DType) *a2avCase {
	n, es := len(w.heaps), dt.Size()
	v := &a2avCase{dt: dt}
	v.in, v.out = w.alloc(t, a2avCap*es), w.alloc(t, a2avCap*es)
	v.send, v.recv = w.alloc(t, symheap.CountsBytes(n)), w.alloc(t, symheap.CountsBytes(n))
	host := func(a *alloc.Allocator, size int64) *alloc.HostBuffer {
		b, err := a.HostAlloc(size)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
		return b
	}
	for _, h := range w.heaps {
		a := h.Allocator()
		v.inB = append(v.inB, host(a, v.in.Size))
		v.sendB = append(v.sendB, host(a, v.send.Size))
		v.outB = append(v.outB, host(a, v.out.Size))
		v.recvB = append(v.recvB, host(a, v.recv.Size))
		p := host(a, v.out.Size)
		copy(p.Bytes(), bytes.Repeat([]byte{0xee}, int(v.out.Size)))
		v.poison = append(v.poison, p)
	}
	return v
}

// a2avByte is byte j of rank p's in in replay k.
func a2avByte(p, k int, j int64) byte { return byte(71*p + 13*k + 7*int(j) + 1) }

// fill stages replay k: every rank's in and its row of m.
func (v *a2avCase) fill(k int, m [][]int64) {
	for r := range v.inB {
		for j := range v.in.Size {
			v.inB[r].Bytes()[j] = a2avByte(r, k, j)
		}
		for q, c := range m[r] {
			binary.LittleEndian.PutUint64(v.sendB[r].Bytes()[8*q:], uint64(c))
		}
		clear(v.outB[r].Bytes())
		clear(v.recvB[r].Bytes())
	}
}

// step is rank r's captured step.
func (v *a2avCase) step(r int, h symheap.Collectives) error {
	return errors.Join(h.Write(v.in, v.inB[r], 0), h.Write(v.send, v.sendB[r], 0), h.Write(v.out, v.poison[r], 0),
		h.AllToAllV(v.in, v.out, v.send, v.recv, v.dt), h.Read(v.outB[r], 0, v.out), h.Read(v.recvB[r], 0, v.recv))
}

// verify checks rank r's out after replay k of routing m (nil: a bad one,
// nothing received) and its receive counts, recv's column r.
func (v *a2avCase) verify(t *testing.T, r, k int, m, recv [][]int64) {
	es := v.dt.Size()
	want := make([]byte, 0, v.out.Size)
	for p := range m {
		var from int64
		for q := range r {
			from += m[p][q]
		}
		for j := from * es; j < (from+m[p][r])*es; j++ {
			want = append(want, a2avByte(p, k, j))
		}
	}
	want = append(want, bytes.Repeat([]byte{0xee}, int(v.out.Size)-len(want))...)
	require.Equal(t, want, v.outB[r].Bytes(), "replay %d: rank %d's out", k, r)
	for p := range recv {
		got := int64(binary.LittleEndian.Uint64(v.recvB[r].Bytes()[8*p:]))
		require.Equal(t, recv[p][r], got, fmt.Sprintf("replay %d: rank %d's receive count from rank %d", k, r, p))
	}
}

// a2avBadOperands: operands AllToAllV cannot serve are typed errors made
// on rank 0 alone, and queue nothing: a barrier of every rank then
// passes, which it would not with rank 0 a collective ahead.
func a2avBadOperands(t *testing.T, w *world) {
	n := len(w.heaps)
	t.Cleanup(func() {
		for _, h := range w.heaps {
			require.NoError(t, h.Reset())
		}
	})
	in, out := w.alloc(t, 4096), w.alloc(t, 4096)
	send, recv := w.alloc(t, symheap.CountsBytes(n)), w.alloc(t, symheap.CountsBytes(n))
	short := symheap.Tensor{Off: send.Off, Size: send.Size - 8}
	skewed := symheap.Tensor{Off: send.Off + 4, Size: send.Size}
	odd := symheap.Tensor{Off: in.Off, Size: 4095}
	h := w.heaps[0]
	for _, c := range []struct {
		name            string
		in, out, sc, rc symheap.Tensor
		dt              symheap.DType
		want            error
	}{
		{"counts of another size", in, out, short, recv, symheap.Float32, alloc.ErrInvalidSize},
		{"counts not 8-aligned", in, out, skewed, recv, symheap.Float32, alloc.ErrInvalidSize},
		{"partial element", odd, out, send, recv, symheap.Float32, alloc.ErrInvalidSize},
		{"unknown element type", in, out, send, recv, symheap.DType(9), alloc.ErrInvalidValue},
		{"send and receive counts one tensor", in, out, send, send, symheap.Float32, alloc.ErrInvalidValue},
		{"counts inside in", in, out, symheap.Tensor{Off: in.Off, Size: send.Size}, recv, symheap.Float32, alloc.ErrInvalidValue},
		{"in and out overlap", in, in, send, recv, symheap.Int32, alloc.ErrInvalidValue},
		{"outside the heap", in, symheap.Tensor{Off: 1 << 30, Size: 64}, send, recv, symheap.Int32, alloc.ErrOutOfRange},
	} {
		require.ErrorIs(t, h.AllToAllV(c.in, c.out, c.sc, c.rc, c.dt), c.want, c.name)
	}
	w.must(t, func(_ int, h symheap.Collectives) error { return errors.Join(h.Barrier(), h.Synchronize()) })
}
