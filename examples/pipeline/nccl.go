package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/rankheap"
	"github.com/capalloc/capalloc/nccl"
	"github.com/capalloc/capalloc/symheap"
)

// The NCCL transport (-transport=nccl): each stage a process and a rank
// of one NCCL communicator (RCCL's on hip), on device r. A stage computes
// on a heap of its own (one rank: the heap's kernels, as on the heap
// transport); stage 0 Sends its activations to stage 1, which Recvs them
// and Sends back its previous output (where a training pipeline would
// send gradients), both directions in one Group on each stage, so neither
// order of the calls can deadlock. Each stage's step, the NCCL calls
// among its copies and kernels, is captured once and replayed; stage 1
// checks every output and stage 0 every output sent back, against the
// single-rank computation, bit for bit.

const (
	envTransport  = "PIPELINE_TRANSPORT" // set in a stage process: "nccl", or unset for the heap
	envBackend    = "PIPELINE_BACKEND"
	envRendezvous = "PIPELINE_RENDEZVOUS" // the file rank 0 hands the unique id to rank 1 through
)

// runNCCL loads the collective library for backend, then starts one
// process per stage and waits for them. Without a library it fails with
// the loader's error, which names every path it tried.
func runNCCL(w io.Writer, backend string, steps int) error {
	c, err := stageChoice(backend, -1)
	if err != nil {
		return err
	}
	l, err := nccl.LoadFor(c.Name)
	if err != nil {
		return fmt.Errorf("-transport=nccl: %w", err)
	}
	dir, err := os.MkdirTemp("", "pipeline-nccl-") // mode 0700, as FileRendezvous requires
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := []string{envTransport + "=nccl", envBackend + "=" + backend, envRendezvous + "=" + filepath.Join(dir, "unique-id")}
	if err := runStages(env, nil, steps); err != nil {
		return err
	}
	vendor := "NCCL"
	if l.RCCL {
		vendor = "RCCL"
	}
	fmt.Fprintf(w, "2 stages as processes on %s over %s %s send/recv (%s), %d steps replayed, every output checked\n",
		c.Name, vendor, nccl.VersionString(l.Version), l.Path, steps)
	return nil
}

// stageChoice is backend with device r (r >= 0): NCCL wants a device per
// rank.
func stageChoice(backend string, r int) (backends.Choice, error) {
	cfg, err := backends.ParseConfig(backend)
	if err != nil {
		return backends.Choice{}, err
	}
	if len(cfg) != 1 {
		return backends.Choice{}, fmt.Errorf("%w: -transport=nccl takes one backend, not the chain %q", alloc.ErrInvalidValue, backend)
	}
	c := cfg[0]
	if r >= 0 {
		opts := backends.Options{"device": strconv.Itoa(r)}
		for k, v := range c.Options {
			if k != "device" {
				opts[k] = v
			}
		}
		c.Options = opts
	}
	return c, nil
}

// ncclStageProcess is stage r in a process of its own: its driver on
// device r, its heap, its communicator, then its steps.
func ncclStageProcess(r, steps int) (err error) {
	c, err := stageChoice(os.Getenv(envBackend), r)
	if err != nil {
		return err
	}
	d, err := c.Open(context.Background())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	dev, ok := d.(nccl.DeviceRunner)
	if !ok {
		return fmt.Errorf("%w: -transport=nccl: backend %s has no device thread for NCCL (cuda or hip)", alloc.ErrInvalidValue, c)
	}
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	h, _, err := rankheap.Source{Exchange: symheap.NewLocalExchange(1), Size: heapSize}.Open(0, a, symheap.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	dh, ok := h.(*symheap.DeviceHeap)
	if !ok {
		return fmt.Errorf("%w: -transport=nccl: backend %s runs no device heap", alloc.ErrInvalidValue, c)
	}
	l, err := nccl.LoadFor(c.Name)
	if err != nil {
		return err
	}
	comm, err := l.InitFromFile(dev, os.Getenv(envRendezvous), stages, r, timeout)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, comm.Destroy()) }()
	return ncclRun(dh, l, comm, steps)
}

// ncclRun is stage r's work: its heap's layout as on the heap transport,
// and two buffers NCCL moves: wire (stage 0's activations, sent and
// received) and back (stage 1's previous output, sent back).
func ncclRun(h *symheap.DeviceHeap, l *nccl.Library, c *nccl.Comm, steps int) (err error) {
	a, r := h.Allocator(), c.Rank()
	t, err := layout(h)
	if err != nil {
		return err
	}
	var wire, back alloc.Buffer
	for _, b := range []*alloc.Buffer{&wire, &back} {
		if *b, err = a.Alloc(4 * width); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, a.Free(*b)) }()
	}
	host, vals, err := hostBias(a, r)
	if err != nil {
		return err
	}
	defer host.Close()
	got, err := a.HostAlloc(4 * width) // stage 0: the output sent back
	if err != nil {
		return err
	}
	defer got.Close()
	err = errors.Join(
		h.Write(t.bias, host, 0),
		a.Memset(back, 0, 0, back.Size()), // stage 1's output before its first step
		h.Synchronize(),
	)
	if err != nil {
		return err
	}
	s := ncclStep{h: h, l: l, c: c, t: t, wire: wire, back: back, host: host, got: got}
	graph, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, s.run)
	if err != nil {
		return fmt.Errorf("stage %d: capture: %w", r, err)
	}
	defer graph.Close()
	sent := floats(got.Bytes())
	return replay(graph, h, r, steps, vals, func(k int) error {
		switch {
		case r == 1:
			return checkOutputs(k, vals, "")
		case k > 0:
			return checkOutputs(k-1, sent, fmt.Sprintf(" (sent back at step %d)", k))
		}
		for i, v := range sent {
			if v != 0 {
				return fmt.Errorf("step 0: value %d sent back is %v, not stage 1's zeroed output", i, v)
			}
		}
		return nil
	})
}

// ncclStep is one stage's step, captured.
type ncclStep struct {
	h          *symheap.DeviceHeap
	l          *nccl.Library
	c          *nccl.Comm
	t          tensors
	wire, back alloc.Buffer
	host, got  *alloc.HostBuffer
}

func (s ncclStep) run() error {
	h, a, t, n := s.h, s.h.Allocator(), s.t, int64(4*width)
	heap, at := h.Buffer(), func(x symheap.Tensor) int64 { return symheap.SignalPadBytes + x.Off }
	if s.c.Rank() == 0 {
		return errors.Join(
			h.Write(t.x, s.host, 0),
			h.CopyLocal(t.act, t.bias),
			h.Axpy(t.act, t.x, 2),
			a.Copy(s.wire, 0, heap, at(t.act), n),
			s.l.Group(func() error {
				return errors.Join(
					s.c.Send(a, s.wire, width, nccl.Float32, 1),
					s.c.Recv(a, s.back, width, nccl.Float32, 1),
				)
			}),
			a.DownloadHost(s.got, 0, s.back, 0, n),
		)
	}
	return errors.Join(
		s.l.Group(func() error {
			return errors.Join(
				s.c.Recv(a, s.wire, width, nccl.Float32, 0),
				s.c.Send(a, s.back, width, nccl.Float32, 0), // the previous step's output
			)
		}),
		a.Copy(heap, at(t.act), s.wire, 0, n),
		h.CopyLocal(t.out, t.bias),
		h.Axpy(t.out, t.act, 0.5),
		a.Copy(s.back, 0, heap, at(t.out), n),
		h.Read(s.host, 0, t.out),
	)
}
