// Command stepexec shows the step executor (package alloc/step): a decode
// loop whose token producer cannot be captured (it uploads token ids from
// a Go slice, a pageable copy, which a capture refuses) runs that producer
// eagerly in Pre at every step, and the rest of the step, warmed up, is
// captured once and replayed.
//
// The engine records its non-capturable operations in the registry at
// start-up and places each operation by asking it: those it names go to
// Pre, the others to the captured region. With -misplace the engine
// ignores the registry and puts the upload in the captured region: the
// capture fails (a refused pageable copy), ends cleanly, and every step
// runs eagerly with the same results; the stats say why.
//
//	go run ./examples/stepexec -steps 100
//	go run ./examples/stepexec -misplace
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/step"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/prog"
)

func main() {
	backend := prog.BackendFlag()
	steps := flag.Int("steps", 100, "decode steps")
	misplace := flag.Bool("misplace", false, "put the non-capturable upload in the captured region (the capture fails; the step falls back to eager)")
	flag.Parse()
	prog.ExitOnError("stepexec", run(os.Stdout, *backend, *steps, *misplace))
}

const (
	batch  = 64 // tokens per step, one byte each
	layers = 8
)

// opUpload is the producer: token ids from a Go slice, a pageable copy.
const opUpload = "tokens.upload"

// op is one operation of the engine's step.
type op struct {
	name string
	run  func() error
}

type engine struct {
	a      *alloc.Allocator
	ids    []byte       // the host's token ids (a Go slice: pageable)
	tokens alloc.Buffer // device copy of ids
	weight alloc.Buffer // stands in for the weights: layers rows of batch bytes
	act    alloc.Buffer // activations: tokens | mixed row | layer marks
	logits *alloc.HostBuffer
}

// ops is the step, in order.
func (e *engine) ops() []op {
	a := e.a
	return []op{
		{opUpload, func() error { return a.Upload(e.tokens, 0, e.ids) }},
		{"embed", func() error { return a.Copy(e.act, 0, e.tokens, 0, batch) }},
		{"layers", func() error {
			for l := range layers {
				if err := errors.Join(
					a.Copy(e.act, batch, e.weight, int64(l*batch), batch),
					a.Memset(e.act, 2*batch+int64(l), byte(l+1), 1),
				); err != nil {
					return err
				}
			}
			return nil
		}},
		{"logits", func() error { return a.DownloadHost(e.logits, 0, e.act, 0, 2*batch+layers) }},
	}
}

// regions places each operation: the registry's go before the capture.
func regions(ops []op, ignoreRegistry bool) (pre, captured func() error) {
	var p, c []op
	for _, o := range ops {
		if !ignoreRegistry && step.IsNonCapturable(o.name) {
			p = append(p, o)
		} else {
			c = append(c, o)
		}
	}
	seq := func(ops []op) func() error {
		return func() error {
			for _, o := range ops {
				if err := o.run(); err != nil {
					return fmt.Errorf("%s: %w", o.name, err)
				}
			}
			return nil
		}
	}
	return seq(p), seq(c)
}

// check is Post's: the step's logits come from this step's tokens, and the
// next tokens are picked from them (a decode loop's feedback).
func (e *engine) check(s int) error {
	if err := e.a.Synchronize(); err != nil {
		return err
	}
	lg := e.logits.Bytes()
	for i := range batch {
		if lg[i] != e.ids[i] {
			return fmt.Errorf("step %d: logits[%d] = %d from token %d: a stale input", s, i, lg[i], e.ids[i])
		}
	}
	for l := range layers {
		if lg[2*batch+l] != byte(l+1) {
			return fmt.Errorf("step %d: layer %d did not run", s, l)
		}
	}
	for i := range batch { // the next tokens depend on these logits
		e.ids[i] = lg[i] + lg[batch+i] + 1
	}
	return nil
}

func run(w io.Writer, backend string, steps int, misplace bool) error {
	// What capprobe (or experience) says cannot be captured.
	step.NonCapturable(opUpload)

	opened, err := backends.OpenString(context.Background(), backend)
	if err != nil {
		return err
	}
	drv := opened.Driver
	defer drv.Close()
	a, err := alloc.New(drv, alloc.Options{})
	if err != nil {
		return err
	}
	e := &engine{a: a, ids: make([]byte, batch)}
	if err := e.reserve(); err != nil {
		return err
	}
	pre, captured := regions(e.ops(), misplace)
	s := 0
	st, err := step.New(a, step.Config{
		Mode:     alloc.Global,
		WarmUp:   2,
		Pre:      pre,
		Captured: captured,
		Post:     func() error { return e.check(s) },
	})
	if err != nil {
		return err
	}
	for ; s < steps; s++ {
		if err := st.Run(); err != nil {
			return err
		}
	}
	stats := st.Stats()
	fmt.Fprintf(w, "%d steps on %s: mode %s, %d warm-up, %d capture(s) tried, %d replays, %d eager\n",
		stats.Steps, backend, stats.Mode, stats.WarmUps, stats.CapturesTried, stats.Replays, stats.EagerRuns)
	if stats.FallbackReason != "" {
		fmt.Fprintf(w, "fell back to eager: %s\n", stats.FallbackReason)
	}
	return errors.Join(st.Close(), e.release(), a.Close())
}

func (e *engine) reserve() (err error) {
	a := e.a
	if e.tokens, err = a.Alloc(batch); err != nil {
		return err
	}
	if e.weight, err = a.Alloc(layers * batch); err != nil {
		return err
	}
	if e.act, err = a.Alloc(2*batch + layers); err != nil {
		return err
	}
	if e.logits, err = a.HostAlloc(2*batch + layers); err != nil {
		return err
	}
	w := make([]byte, layers*batch)
	for i := range w {
		w[i] = byte(i * 13)
	}
	return a.Upload(e.weight, 0, w)
}

func (e *engine) release() error {
	return errors.Join(e.a.Free(e.tokens), e.a.Free(e.weight), e.a.Free(e.act), e.logits.Close())
}
