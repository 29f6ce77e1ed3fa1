package main

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/rankheap"
	"github.com/capalloc/capalloc/symheap"
)

// The model: stage 0 computes act = b0 + 2*x, stage 1 out = b1 + act/2
// (Axpy: y += a*x, in float32, the order the host reference uses).

// tensors are the heap's layout, allocated in the same order on both
// stages so each names the same place on both.
type tensors struct{ x, act, bias, out symheap.Tensor }

func layout(h symheap.Collectives) (t tensors, err error) {
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

// timeout bounds every wait of a stage's heap: a stage that stops
// signalling fails its peer with symheap.ErrCollectiveTimeout.
const timeout = 20 * time.Second

// stage opens rank r's heap on its own driver of backend and allocator,
// captures its step once and replays it steps times, stage 1 checking
// every output. kind is the heap it ran on.
func stage(backend string, hs rankheap.Source, r, steps int) (kind string, err error) {
	return hs.Run(backend, r, symheap.Options{Timeout: timeout}, func(h symheap.Collectives, a *alloc.Allocator) error {
		return run(h, a, r, steps)
	})
}

// run is stage r's work on its open heap h.
func run(h symheap.Collectives, a *alloc.Allocator, r, steps int) error {
	t, err := layout(h)
	if err != nil {
		return err
	}
	host, vals, err := hostBias(a, r)
	if err != nil {
		return err
	}
	defer host.Close()
	if err := h.Write(t.bias, host, 0); err != nil {
		return err
	}
	if r == 1 { // the first credit: stage 0 may put its first activations
		if err := h.Signal(0, slotCredit, 1); err != nil {
			return err
		}
	}
	// Both stages are set up (their pinned buffers made) before either
	// captures: on cuda and hip both are threads of one process, and a
	// device of unknown capture safety refuses a pinned allocation while
	// any capture is active in the process. ThreadLocal, as a Global-mode
	// capture on one stage would refuse the other's Synchronize.
	if err := h.Barrier(); err != nil {
		return err
	}
	if err := h.Synchronize(); err != nil {
		return err
	}
	graph, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return step(h, r, t, host) })
	if err != nil {
		return fmt.Errorf("stage %d: capture: %w", r, err)
	}
	defer graph.Close()
	return replay(graph, h, r, steps, vals, func(k int) error {
		if r == 1 {
			return checkOutputs(k, vals, "")
		}
		return nil
	})
}

// replay launches stage r's graph steps times, stage 0 writing step k's
// input into vals before each launch, and calls check(k) once the step is
// done.
func replay(graph *alloc.Graph, h interface{ Synchronize() error }, r, steps int, vals []float32, check func(k int) error) error {
	for k := range steps {
		if r == 0 {
			for i := range vals {
				vals[i] = input(k, i)
			}
		}
		if err := graph.Launch(); err != nil {
			return err
		}
		if err := h.Synchronize(); err != nil {
			return fmt.Errorf("stage %d, step %d: %w", r, k, err)
		}
		if err := check(k); err != nil {
			return err
		}
	}
	return nil
}

// checkOutputs compares got, step k's outputs as seen where says, with the
// single-rank computation, bit for bit.
func checkOutputs(k int, got []float32, where string) error {
	for i, v := range got {
		if want := reference(k, i); math.Float32bits(v) != math.Float32bits(want) {
			return fmt.Errorf("step %d: output %d%s is %v, the single-rank computation gives %v", k, i, where, v, want)
		}
	}
	return nil
}

// step is one stage's step, as captured: stage 0 reads the input from the
// host buffer, stage 1 writes the output into it.
func step(h symheap.Collectives, r int, t tensors, host *alloc.HostBuffer) error {
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

// hostBias is stage r's pinned host buffer (its input on stage 0, its
// output on stage 1), holding its biases to write into the heap first.
func hostBias(a *alloc.Allocator, r int) (*alloc.HostBuffer, []float32, error) {
	host, err := a.HostAlloc(4 * width)
	if err != nil {
		return nil, nil, err
	}
	vals := floats(host.Bytes())
	for i := range vals {
		vals[i] = bias(r, i)
	}
	return host, vals, nil
}

// floats views pinned host bytes as float32s.
func floats(b []byte) []float32 { return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4) }
