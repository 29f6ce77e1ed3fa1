package main

import (
	"fmt"
	"sync/atomic"

	"github.com/capalloc/capalloc/symheap"
)

// model is one rank's shard and buffers, all allocated in the heap before
// any capture (the same sequence on every rank: the same offsets).
type model struct {
	h      *symheap.Heap
	token  atomic.Int32   // the host writes the current token here
	act    symheap.Tensor // partial activations, then their all-reduced sum
	logits symheap.Tensor
}

func newModel(h *symheap.Heap) (*model, error) {
	m := &model{h: h}
	var err error
	if m.act, err = h.Alloc(4 * hidden); err != nil {
		return nil, err
	}
	if m.logits, err = h.Alloc(4 * hidden); err != nil {
		return nil, err
	}
	return m, nil
}

// weight is rank r's shard: small integers, so float32 sums are exact.
func weight(r, i int) float32 { return float32((r+1)*(i%13) - 6) }

// enqueue puts one step on the rank's stream: local work, all-reduce,
// local work. The host functions read the token at run time.
func (m *model) enqueue() error {
	a := m.h.Allocator()
	if err := a.LaunchHostFunc(func() error {
		tok := float32(m.token.Load() % 1000)
		for i, x := range m.h.Float32s(m.act) {
			_ = x
			m.h.Float32s(m.act)[i] = weight(m.h.Rank(), i) * tok
		}
		return nil
	}); err != nil {
		return err
	}
	if err := m.h.AllReduce(m.act, symheap.Float32); err != nil {
		return err
	}
	return a.LaunchHostFunc(func() error {
		out := m.h.Float32s(m.logits)
		for i, x := range m.h.Float32s(m.act) {
			out[i] = 2*x + 1
		}
		return nil
	})
}

// step runs one step eagerly.
func (m *model) step() error {
	if err := m.enqueue(); err != nil {
		return err
	}
	return m.h.Allocator().Synchronize()
}

// check compares the logits with the host's reference for step s.
func (m *model) check(s int) error {
	tok := float32(tokenAt(s) % 1000)
	for i, got := range m.h.Float32s(m.logits) {
		var sum float32
		for r := range m.h.Ranks() {
			sum += weight(r, i) * tok
		}
		if want := 2*sum + 1; got != want {
			return fmt.Errorf("rank %d: logit %d is %v, want %v", m.h.Rank(), i, got, want)
		}
	}
	return nil
}
