// Command pipeline is a toy two-stage pipeline: each stage a rank; stage
// 0 computes its activations and hands them to stage 1, which computes the
// output. Each stage's step is captured once and replayed with fresh
// inputs; every output is checked against the single-rank computation on
// the host, bit for bit. Two transports:
//
// -transport=heap (the default): stage 0 puts its activations into stage
// 1's symmetric heap and signals; stage 1 waits for the signal, computes
// and signals back that the activations may be overwritten (a credit, so
// stage 0 never runs ahead into activations not yet read). The step is
// written against symheap.Collectives: on cpu the host heap's put and
// signals (host functions), on cuda and hip the device heap's (this
// library's kernels).
//
// -transport=nccl: the stages are processes, each a rank of one NCCL
// communicator (RCCL on hip) on device r; stage 0 Sends its activations
// and stage 1 Recvs them, and sends its previous output back, both
// directions in one Group (nccl.go). The library is found as nccl.Load
// finds it (CAPALLOC_NCCL_LIB, CAPALLOC_RCCL_LIB, then the usual places);
// without one the command fails with the loader's error, which lists every
// path it tried. It never falls back to the heap.
//
//	go run ./examples/pipeline               # the two stages as goroutines, cpu
//	go run ./examples/pipeline -procs        # as processes sharing memfd heaps
//	go run ./examples/pipeline -backend=cuda # goroutine stages on the device heap
//	go run ./examples/pipeline -backend=cuda -transport=nccl # processes over NCCL send/recv
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"

	"github.com/capalloc/capalloc/alloc"
	_ "github.com/capalloc/capalloc/cpu" // the backends a -backend name may ask for
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/prog"
	"github.com/capalloc/capalloc/internal/rankheap"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

const (
	width    = 1024 // activations per step, float32
	heapSize = 1 << 16
	stages   = 2
	envStage = "PIPELINE_STAGE" // set in a stage process: its rank
	envSteps = "PIPELINE_STEPS"

	slotReady  = 0 // stage 1's: activations have arrived
	slotCredit = 1 // stage 0's: stage 1 has read them
)

func main() {
	steps := flag.Int("steps", 100, "steps, each with a fresh input")
	procs := flag.Bool("procs", false, "run the stages as processes (memfd heaps passed to them; cpu)")
	backend := flag.String("backend", "cpu", "backend of both stages (a backends name: cpu, cuda, hip)")
	transport := flag.String("transport", "heap", "how the activations reach stage 1: heap (put and signal) or nccl (send/recv over NCCL, RCCL on hip; stages as processes)")
	flag.Parse()
	var err error
	switch {
	case os.Getenv(envStage) != "":
		err = stageProcess(os.Stdout)
	case *transport == "nccl":
		err = runNCCL(os.Stdout, *backend, *steps)
	case *transport != "heap":
		err = fmt.Errorf("%w: -transport=%q: heap or nccl", alloc.ErrInvalidValue, *transport)
	case *procs && *backend != "cpu":
		err = fmt.Errorf("-procs runs the stages on cpu's host heap, not on %q", *backend)
	case *procs:
		err = runProcesses(os.Stdout, *steps)
	default:
		err = runGoroutines(os.Stdout, *backend, *steps)
	}
	prog.ExitOnError("pipeline", err)
}

// runGoroutines runs both stages in this process, each on its own driver
// of backend.
func runGoroutines(w io.Writer, backend string, steps int) error {
	kinds, err := rankheap.RunLocal(backend, stages, heapSize, symheap.Options{Timeout: timeout}, func(h symheap.Collectives, a *alloc.Allocator, r int) error {
		return run(h, a, r, steps)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "2 stages as goroutines on %s (%s), %d steps replayed, every output checked\n", backend, kinds[0], steps)
	return nil
}

// runProcesses starts one process per stage, every stage's heap file
// passed to each, and waits for them.
func runProcesses(w io.Writer, steps int) error {
	g, err := symheap.NewGroup(stages, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	if err := runStages(nil, g.Files(), steps); err != nil { // fds 3, 4: the stages' heaps, in rank order
		return err
	}
	fmt.Fprintf(w, "2 stages as processes on cpu, %d steps replayed, every output checked\n", steps)
	return nil
}

// runStages starts this executable once per stage, with env added to its
// environment and files as its fds from 3 on, and waits for them.
func runStages(env []string, files []*os.File, steps int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, stages)
	for r := range cmds {
		cmd := exec.Command(exe)
		cmd.Env = append(append(os.Environ(), env...), envStage+"="+strconv.Itoa(r), envSteps+"="+strconv.Itoa(steps))
		cmd.ExtraFiles = files
		cmd.Stderr = os.Stderr
		cmds[r] = cmd
	}
	return errors.Join(ranks.Processes(cmds)...) // a stage is a rank
}

// stageProcess is one stage in a process of its own.
func stageProcess(w io.Writer) error {
	r, err1 := strconv.Atoi(os.Getenv(envStage))
	steps, err2 := strconv.Atoi(os.Getenv(envSteps))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if os.Getenv(envTransport) == "nccl" {
		return ncclStageProcess(r, steps)
	}
	g, err := symheap.Attach(ranks.InheritedFiles(stages), heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	_, err = stage("cpu", rankheap.Source{Group: g}, r, steps)
	return err
}
