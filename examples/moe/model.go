package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

const (
	experts  = 4  // ranks; rank e hosts expert e
	tokens   = 32 // at most, per rank and step
	dim      = 8  // float32s per token
	heapSize = 1 << 16
	// timeout bounds every wait of a rank's heap.
	timeout = 20 * time.Second
)

// The model. Token t of rank r at step k holds input(k, r, t, d); expert
// e maps it to (e+1)*x + bias(e, d) (Axpy over the bias, in float32; the
// values are quarters small enough that every product and sum is exact).

func input(k, r, t, d int) float32 { return float32((k*13+r*29+t*7+d*3)%61-30) / 4 }
func bias(e, d int) float32        { return float32(e*5+d) / 4 }

func expert(e int, x float32, d int) float32 {
	y := bias(e, d)
	y += float32(e+1) * x
	return y
}

// routed is rank r's routing at step k: its tokens' experts. Every fourth
// step (from 1) sends every token to one expert, so the others receive
// nothing; every fourth step (from 3) gives one rank no tokens at all.
func routed(k, r int) []int {
	n := tokens
	if k%4 == 3 && r == k/4%experts {
		n = 0
	}
	es := make([]int, n)
	for t := range es {
		h := uint32(k*2654435761) ^ uint32(r*40503+t*9973)
		h ^= h >> 13
		h *= 0x5bd1e995
		es[t] = int(h>>7) % experts
		if k%4 == 1 {
			es[t] = k / 4 % experts
		}
	}
	return es
}

// tensors are every rank's heap layout, allocated in the same order on
// every rank so each names the same place on all.
type tensors struct {
	x, recv, y, bias, back symheap.Tensor
	send, dispRecv, comb   symheap.Tensor // counts: Ranks() int64
}

func layout(h symheap.Collectives) (t tensors, err error) {
	tok, all := int64(4*tokens*dim), int64(4*experts*tokens*dim)
	for _, a := range []struct {
		p    *symheap.Tensor
		size int64
	}{{&t.x, tok}, {&t.recv, all}, {&t.y, all}, {&t.bias, all}, {&t.back, tok},
		{&t.send, symheap.CountsBytes(experts)}, {&t.dispRecv, symheap.CountsBytes(experts)}, {&t.comb, symheap.CountsBytes(experts)}} {
		if *a.p, err = h.Alloc(a.size); err != nil {
			return t, err
		}
	}
	return t, nil
}

// staging is a rank's pinned memory: the tokens grouped by expert and
// the send counts (filled before each replay), the results and the
// combine's receive counts (read by it).
type staging struct {
	x, counts, back, comb *alloc.HostBuffer
}

func newStaging(a *alloc.Allocator) (*staging, error) {
	var s staging
	var errs []error
	for _, b := range []struct {
		p    **alloc.HostBuffer
		size int64
	}{{&s.x, 4 * tokens * dim}, {&s.counts, 8 * experts}, {&s.back, 4 * tokens * dim}, {&s.comb, 8 * experts}} {
		var err error
		*b.p, err = a.HostAlloc(b.size)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, s.close())
	}
	return &s, nil
}

func (s *staging) close() error {
	var errs []error
	for _, b := range []*alloc.HostBuffer{s.x, s.counts, s.back, s.comb} {
		if b != nil {
			errs = append(errs, b.Close())
		}
	}
	return errors.Join(errs...)
}

// step is rank r's step, as captured: dispatch, the expert, combine.
func step(h symheap.Collectives, r int, t tensors, s *staging) error {
	return errors.Join(
		h.Write(t.x, s.x, 0),
		h.Write(t.send, s.counts, 0),
		h.AllToAllV(t.x, t.recv, t.send, t.dispRecv, symheap.Float32), // dispatch
		h.CopyLocal(t.y, t.bias),
		h.Axpy(t.y, t.recv, float32(r+1)),                             // expert r, over every slot
		h.AllToAllV(t.y, t.back, t.dispRecv, t.comb, symheap.Float32), // combine: send back what came
		h.Read(s.back, 0, t.back),
		h.Read(s.comb, 0, t.comb),
	)
}

// order is rank r's tokens at step k grouped by expert (stable), and how
// many go to each.
func order(k, r int) (idx []int, per [experts]int) {
	es := routed(k, r)
	for t := range es {
		idx = append(idx, t)
		per[es[t]]++
	}
	slices.SortStableFunc(idx, func(a, b int) int { return es[a] - es[b] })
	return idx, per
}

// fill stages rank r's step k: its tokens in expert order and its counts.
func (s *staging) fill(k, r int) {
	idx, per := order(k, r)
	xs := floats(s.x.Bytes())
	clear(xs)
	for i, t := range idx {
		for d := range dim {
			xs[i*dim+d] = input(k, r, t, d)
		}
	}
	for e, n := range per {
		binary.LittleEndian.PutUint64(s.counts.Bytes()[8*e:], uint64(n*dim))
	}
	clear(s.back.Bytes())
	clear(s.comb.Bytes())
}

// check compares rank r's results of step k, token by token, with the
// single-process computation, and the combine's receive counts with what
// the rank dispatched.
func (s *staging) check(k, r int) error {
	idx, per := order(k, r)
	es, ys := routed(k, r), floats(s.back.Bytes())
	for i, t := range idx {
		for d := range dim {
			got, want := ys[i*dim+d], expert(es[t], input(k, r, t, d), d)
			if math.Float32bits(got) != math.Float32bits(want) {
				return fmt.Errorf("step %d: rank %d's token %d (expert %d), element %d is %v, the single-process computation gives %v", k, r, t, es[t], d, got, want)
			}
		}
	}
	for e, n := range per {
		if got := binary.LittleEndian.Uint64(s.comb.Bytes()[8*e:]); got != uint64(n*dim) {
			return fmt.Errorf("step %d: rank %d got %d elements back from expert %d, it sent %d", k, r, got, e, n*dim)
		}
	}
	return nil
}

// runRank is rank r's work on its open heap h: the biases written, the
// step captured once and replayed steps times with new routing.
func runRank(h symheap.Collectives, a *alloc.Allocator, r, steps int) error {
	t, err := layout(h)
	if err != nil {
		return err
	}
	s, err := newStaging(a)
	if err != nil {
		return err
	}
	defer s.close()
	if err := writeBias(h, a, t.bias, r); err != nil {
		return err
	}
	// Every rank is set up (its pinned buffers made) before any captures:
	// ThreadLocal, as a Global-mode capture would refuse a peer's work.
	if err := errors.Join(h.Barrier(), h.Synchronize()); err != nil {
		return err
	}
	graph, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return step(h, r, t, s) })
	if err != nil {
		return fmt.Errorf("rank %d: capture: %w", r, err)
	}
	defer graph.Close()
	for k := range steps {
		s.fill(k, r)
		if err := graph.Launch(); err != nil {
			return err
		}
		if err := h.Synchronize(); err != nil {
			return fmt.Errorf("rank %d, step %d: %w", r, k, err)
		}
		if err := s.check(k, r); err != nil {
			return err
		}
	}
	return nil
}

// writeBias fills expert r's bias tensor: its bias per element, in every
// token slot.
func writeBias(h symheap.Collectives, a *alloc.Allocator, bt symheap.Tensor, r int) error {
	hb, err := a.HostAlloc(bt.Size)
	if err != nil {
		return err
	}
	defer hb.Close()
	bs := floats(hb.Bytes())
	for i := range bs {
		bs[i] = bias(r, i%dim)
	}
	return errors.Join(h.Write(bt, hb, 0), h.Synchronize())
}

// floats views pinned host bytes as float32s.
func floats(b []byte) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4) }
