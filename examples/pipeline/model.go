package main

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/symheap"
)

// The model: stage 0 computes act = b0 + 2*x, stage 1 out = b1 + act/2
// (Axpy: y += a*x, in float32, the order the host reference uses).

// tensors are the heap's layout, allocated in the same order on both
// stages so each names the same place on both.
type tensors struct{ x, act, bias, out symheap.Tensor }

func layout(h *symheap.Heap) (t tensors, err error) {
	for _, p := range []*symheap.Tensor{&t.x, &t.act, &t.bias, &t.out} {
		if *p, err = h.Alloc(4 * width); err != nil {
			return t, err
		}
	}
	return t, nil
}

func input(step, i int) float32 { return float32((step*31+i*7)%97) - 48 }
func bias(r, i int) float32     { return float32(r*3+i%11) * 0.25 }

// reference is the single-rank computation of output i at step.
func reference(step, i int) float32 {
	act := bias(0, i)
	act += 2 * input(step, i)
	out := bias(1, i)
	out += 0.5 * act
	return out
}

// stage opens rank r's heap on its own cpu allocator, captures its step
// once and replays it steps times, stage 1 checking every output.
func stage(g *symheap.Group, r, steps int) error {
	d, err := cpu.New(cpu.Options{})
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	h, err := g.Open(r, a, symheap.Options{Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer h.Close()
	t, err := layout(h)
	if err != nil {
		return err
	}
	host, err := a.HostAlloc(4 * width)
	if err != nil {
		return err
	}
	defer host.Close()
	vals := floats(host.Bytes())
	for i := range vals {
		vals[i] = bias(r, i)
	}
	if err := h.Write(t.bias, host, 0); err != nil {
		return err
	}
	if r == 1 { // the first credit: stage 0 may put its first activations
		if err := h.Signal(0, slotCredit, 1); err != nil {
			return err
		}
	}
	if err := h.Synchronize(); err != nil {
		return err
	}
	graph, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error { return step(h, r, t, host) })
	if err != nil {
		return fmt.Errorf("stage %d: capture: %w", r, err)
	}
	defer graph.Close()
	for s := range steps {
		if r == 0 {
			for i := range vals {
				vals[i] = input(s, i)
			}
		}
		if err := graph.Launch(); err != nil {
			return err
		}
		if err := h.Synchronize(); err != nil {
			return fmt.Errorf("stage %d, step %d: %w", r, s, err)
		}
		if r == 1 {
			for i, v := range vals {
				if want := reference(s, i); math.Float32bits(v) != math.Float32bits(want) {
					return fmt.Errorf("step %d: output %d is %v, the single-rank computation gives %v", s, i, v, want)
				}
			}
		}
	}
	return nil
}

// step is one stage's step, as captured: stage 0 reads the input from the
// host buffer, stage 1 writes the output into it.
func step(h *symheap.Heap, r int, t tensors, host *alloc.HostBuffer) error {
	if r == 0 {
		return errors.Join(
			h.Write(t.x, host, 0),
			h.CopyLocal(t.act, t.bias),
			h.Axpy(t.act, t.x, 2),
			h.WaitSignal(slotCredit, 1), // stage 1 has read the last activations
			h.Put(1, t.act, t.act),
			h.Signal(1, slotReady, 1),
		)
	}
	return errors.Join(
		h.WaitSignal(slotReady, 1),
		h.CopyLocal(t.out, t.bias),
		h.Axpy(t.out, t.act, 0.5),
		h.Signal(0, slotCredit, 1), // act may be overwritten
		h.Read(host, 0, t.out),
	)
}

// floats views pinned host bytes as float32s.
func floats(b []byte) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4) }
