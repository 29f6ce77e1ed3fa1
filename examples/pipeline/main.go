// Command pipeline is a toy two-stage pipeline on the symmetric heap:
// each stage a rank; stage 0 computes its activations, puts them into
// stage 1's heap and signals; stage 1 waits for the signal, computes the
// output and signals back that the activations may be overwritten (a
// credit, so stage 0 never runs ahead into activations not yet read).
// Each stage's step is captured once and replayed with fresh inputs;
// every output is checked against the single-rank computation on the
// host, bit for bit. The step is written against symheap.Collectives: on
// cpu the host heap's put and signals (host functions), on cuda and hip
// the device heap's (this library's kernels).
//
//	go run ./examples/pipeline               # the two stages as goroutines, cpu
//	go run ./examples/pipeline -procs        # as processes sharing memfd heaps
//	go run ./examples/pipeline -backend=cuda # goroutine stages on the device heap
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"

	_ "github.com/capalloc/capalloc/cpu" // the backends a -backend name may ask for
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
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
	flag.Parse()
	var err error
	switch {
	case os.Getenv(envStage) != "":
		err = stageProcess(os.Stdout)
	case *procs && *backend != "cpu":
		err = fmt.Errorf("-procs runs the stages on cpu's host heap, not on %q", *backend)
	case *procs:
		err = runProcesses(os.Stdout, *steps)
	default:
		err = runGoroutines(os.Stdout, *backend, *steps)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

// runGoroutines runs both stages in this process, each on its own driver
// of backend.
func runGoroutines(w io.Writer, backend string, steps int) error {
	g, err := symheap.NewGroup(stages, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	hs := heaps{g: g, x: symheap.NewLocalExchange(stages)}
	var wg sync.WaitGroup
	errs := make([]error, stages)
	kinds := make([]string, stages)
	for r := range stages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kinds[r], errs[r] = stage(backend, hs, r, steps)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
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
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var cmds []*exec.Cmd
	for r := range stages {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), envStage+"="+strconv.Itoa(r), envSteps+"="+strconv.Itoa(steps))
		cmd.ExtraFiles = g.Files() // fds 3, 4: the stages' heaps, in rank order
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds = append(cmds, cmd)
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stage %d: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(w, "2 stages as processes on cpu, %d steps replayed, every output checked\n", steps)
	return nil
}

// stageProcess is one stage in a process of its own.
func stageProcess(w io.Writer) error {
	r, err1 := strconv.Atoi(os.Getenv(envStage))
	steps, err2 := strconv.Atoi(os.Getenv(envSteps))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	files := make([]*os.File, stages)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("heap-%d", i))
	}
	g, err := symheap.Attach(files, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	_, err = stage("cpu", heaps{g: g}, r, steps)
	return err
}
