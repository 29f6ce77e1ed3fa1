// Command decodeloop shows the pattern capalloc exists for: an engine's
// decode step captured once into a graph and replayed with fresh inputs.
//
// Each step reads the current token ids from a pinned host buffer, runs the
// "model" (here: stream-ordered copies and memsets standing in for kernels,
// or with -kernels=N, N real kernels: y = x + y over 4096 float32, this
// library's axpy, on drivers that run device code: cuda, hip), and writes
// its logits to a pinned output. Everything the step touches is reserved
// before the capture, so the capture allocates nothing, and every replay
// reads the tokens the host wrote just before it.
//
//	go run ./examples/decodeloop -steps 1000
//	go run ./examples/decodeloop -backend=cuda -kernels=1000
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/prog"
)

func main() {
	backend := prog.BackendFlag()
	steps := flag.Int("steps", 1000, "decode steps to run in each mode")
	kern := flag.Int("kernels", 0, "kernels per step (axpy; cuda, hip): 0 runs copies and memsets instead")
	flag.Parse()
	prog.ExitOnError("decodeloop", run(os.Stdout, *backend, *steps, *kern))
}

const (
	batch  = 64   // tokens per step, one byte each
	hidden = 4096 // bytes of activations per step
	layers = 16
)

// engine holds what a decode step uses; all of it exists before capture.
type engine struct {
	a      *alloc.Allocator
	tokens *alloc.HostBuffer // pinned input, rewritten by the host every step
	logits *alloc.HostBuffer // pinned output
	embed  alloc.Buffer      // stands in for the weights
	act    alloc.Buffer      // activations

	// With kernels > 0: the step is that many axpy kernels, y = x + y.
	kernels    int
	kl         driver.KernelLauncher
	axpy       driver.Kernel
	block      uint32
	grid       uint32
	xs, ys     alloc.Buffer      // float32[hidden]
	xin, yout  *alloc.HostBuffer // pinned: x in (every element the token), y[0] out
	axpyParams []byte
}

// step enqueues one decode step. It makes no allocation: the scratch space
// comes from a workspace reserved before the capture.
func (e *engine) step() error {
	if e.kernels > 0 {
		return e.kernelStep()
	}
	a := e.a
	ws, err := a.Workspace("attn", hidden)
	if err != nil {
		return err
	}
	if err := a.UploadHost(e.act, 0, e.tokens, 0, batch); err != nil {
		return err
	}
	for l := 0; l < layers; l++ { // "kernels": mix weights into the activations
		if err := a.Copy(ws, 0, e.embed, int64(l*batch), batch); err != nil {
			return err
		}
		if err := a.Copy(e.act, batch, ws, 0, batch); err != nil {
			return err
		}
		if err := a.Memset(e.act, 2*batch+int64(l), byte(l), 1); err != nil {
			return err
		}
	}
	return a.DownloadHost(e.logits, 0, e.act, 0, 3*batch)
}

func run(w io.Writer, backend string, steps, kernelsPerStep int) error {
	opened, err := backends.OpenString(context.Background(), backend)
	if err != nil {
		return err
	}
	drv := opened.Driver
	defer drv.Close()
	fmt.Fprintln(w, opened.Report())
	a, err := alloc.New(drv, alloc.Options{})
	if err != nil {
		return err
	}
	e := &engine{a: a, kernels: kernelsPerStep}
	if err := e.reserve(); err != nil {
		return err
	}
	if err := e.reserveKernels(); err != nil {
		return err
	}

	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, e.step)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "captured one decode step: %d allocations inside the capture\n", a.CaptureAllocCount())

	eager, err := e.timed(steps, e.step)
	if err != nil {
		return err
	}
	wantLast := append([]byte(nil), e.logits.Bytes()...)
	replay, err := e.timed(steps, g.Launch)
	if err != nil {
		return err
	}
	if !bytes.Equal(wantLast, e.logits.Bytes()) {
		return fmt.Errorf("the graph's last step differs from the eager run's: stale inputs")
	}
	what := "copies and memsets"
	if e.kernels > 0 {
		what = fmt.Sprintf("%d axpy kernels", e.kernels)
	}
	fmt.Fprintf(w, "%d steps of %s on %s: eager %v/step, graph replay %v/step (%.2fx)\n",
		steps, what, backend, eager/time.Duration(steps), replay/time.Duration(steps), float64(eager)/float64(replay))

	if err := g.Close(); err != nil {
		return err
	}
	if err := e.release(); err != nil {
		return err
	}
	return a.Close() // reports any leak
}

func (e *engine) reserve() (err error) {
	a := e.a
	if e.tokens, err = a.HostAlloc(batch); err != nil {
		return err
	}
	if e.logits, err = a.HostAlloc(3 * batch); err != nil {
		return err
	}
	if e.embed, err = a.Alloc(layers * batch); err != nil {
		return err
	}
	if e.act, err = a.Alloc(3 * batch); err != nil {
		return err
	}
	if _, err = a.Workspace("attn", hidden); err != nil {
		return err
	}
	weights := make([]byte, layers*batch)
	for i := range weights {
		weights[i] = byte(i * 13)
	}
	return a.Upload(e.embed, 0, weights)
}

// timed runs steps decode steps through do, writing fresh token ids before
// each one and synchronizing after it, as a decode loop must before reading
// the logits to pick the next tokens.
func (e *engine) timed(steps int, do func() error) (time.Duration, error) {
	start := time.Now()
	for s := 0; s < steps; s++ {
		tok := e.tokens.Bytes()
		for i := range tok {
			tok[i] = byte(s + i)
		}
		if e.kernels > 0 {
			e.writeKernelInput(s)
		}
		if err := do(); err != nil {
			return 0, err
		}
		if err := e.a.Synchronize(); err != nil {
			return 0, err
		}
		if e.kernels > 0 {
			if err := e.checkKernelStep(s); err != nil {
				return 0, err
			}
			continue
		}
		if got := e.logits.Bytes()[0]; got != byte(s) {
			return 0, fmt.Errorf("step %d: logits computed from token %d, want %d (stale input)", s, got, byte(s))
		}
	}
	return time.Since(start), nil
}

func (e *engine) release() error {
	if e.kernels > 0 {
		for _, err := range []error{e.a.Free(e.xs), e.a.Free(e.ys), e.xin.Close(), e.yout.Close()} {
			if err != nil {
				return err
			}
		}
	}
	for _, err := range []error{
		e.a.ReleaseWorkspace("attn"), e.a.Free(e.act), e.a.Free(e.embed), e.tokens.Close(), e.logits.Close(),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}
