package main

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// model is one rank's step, written against symheap.Collectives only, so
// it runs unchanged on the host heap (cpu: host functions) and the device
// heap (cuda, hip: this library's kernels). Every tensor is allocated in
// the heap before any capture (the same sequence on every rank: the same
// offsets); the host talks to the step through pinned buffers, so a replay
// reads the current token's features and writes the current logits.
type model struct {
	h              symheap.Collectives
	x, act, logits symheap.Tensor // input features, activations, logits
	ones           symheap.Tensor
	in, out        *alloc.HostBuffer // pinned: features in, logits out
}

func newModel(h symheap.Collectives) (*model, error) {
	m := &model{h: h}
	for _, t := range []*symheap.Tensor{&m.x, &m.act, &m.logits, &m.ones} {
		var err error
		if *t, err = h.Alloc(4 * hidden); err != nil {
			return nil, err
		}
	}
	a := h.Allocator()
	var err error
	if m.in, err = a.HostAlloc(4 * hidden); err != nil {
		return nil, err
	}
	if m.out, err = a.HostAlloc(4 * hidden); err != nil {
		return nil, m.close(err)
	}
	for i := range hidden {
		binary.LittleEndian.PutUint32(m.in.Bytes()[4*i:], math.Float32bits(1))
	}
	if err := h.Write(m.ones, m.in, 0); err != nil {
		return nil, m.close(err)
	}
	if err := h.Synchronize(); err != nil {
		return nil, m.close(err)
	}
	return m, nil
}

func (m *model) close(err error) error {
	for _, b := range []*alloc.HostBuffer{m.in, m.out} {
		if b != nil {
			if cerr := b.Close(); err == nil {
				err = cerr
			}
		}
	}
	return err
}

// feature is input feature i of a token: small integers, so every float32
// sum below is exact.
func feature(tok int32, i int) float32 { return float32(tok%1000) * float32(i%13-6) }

// setToken writes the token's features into the pinned input.
func (m *model) setToken(tok int32) {
	b := m.in.Bytes()
	for i := range hidden {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(feature(tok, i)))
	}
}

// enqueue puts one step on the rank's stream: the features in, the local
// work (rank r's partial activations: (r+1)·x, by axpy), the all-reduce,
// the logits (2·act + 1) and the logits out.
func (m *model) enqueue() error {
	h := m.h
	for _, op := range []func() error{
		func() error { return h.Write(m.x, m.in, 0) },
		func() error { return h.CopyLocal(m.act, m.x) },
		func() error { return h.Axpy(m.act, m.x, float32(h.Rank())) },
		func() error { return h.AllReduce(m.act, symheap.Float32) },
		func() error { return h.CopyLocal(m.logits, m.ones) },
		func() error { return h.Axpy(m.logits, m.act, 2) },
		func() error { return h.Read(m.out, 0, m.logits) },
	} {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}

// step runs one step eagerly.
func (m *model) step() error {
	if err := m.enqueue(); err != nil {
		return err
	}
	return m.h.Synchronize()
}

// check compares the logits with the host's reference for token tok:
// 2·Σ_r (r+1)·x + 1.
func (m *model) check(tok int32) error {
	n := m.h.Ranks()
	scale := float32(n * (n + 1) / 2)
	b := m.out.Bytes()
	for i := range hidden {
		got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if want := 2*scale*feature(tok, i) + 1; got != want {
			return fmt.Errorf("rank %d: logit %d is %v, want %v", m.h.Rank(), i, got, want)
		}
	}
	return nil
}
