// Command tpdecode is a tensor-parallel decode step over N ranks, captured
// once with its all-reduce and replayed with fresh tokens.
//
// Each rank holds a shard of the "weights"; a step computes the rank's
// partial activations from the current token (a host function standing in
// for the rank's kernels), all-reduces them across ranks in the symmetric
// heap, and derives the logits. The step is run eagerly, then captured once
// per rank and replayed; every result, eager or replayed, is checked
// against the reference computed on the host.
//
//	go run ./examples/tpdecode                 # 4 ranks as goroutines
//	go run ./examples/tpdecode -procs          # 4 ranks as processes sharing memfd heaps
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
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/symheap"
)

const (
	hidden   = 4096 // activations per step, float32
	heapSize = 1 << 20
	envRank  = "TPDECODE_RANK" // set in a rank process: its rank
	envRanks = "TPDECODE_RANKS"
	envSteps = "TPDECODE_STEPS"
)

func main() {
	ranks := flag.Int("ranks", 4, "tensor-parallel ranks")
	steps := flag.Int("steps", 200, "decode steps in each mode")
	procs := flag.Bool("procs", false, "run the ranks as processes sharing memfd heaps (fds passed to them)")
	flag.Parse()
	if os.Getenv(envRank) != "" {
		exitIf(rankProcess(os.Stdout))
	}
	var err error
	switch {
	case *procs:
		err = runProcesses(os.Stdout, *ranks, *steps)
	default:
		err = runGoroutines(os.Stdout, *ranks, *steps)
	}
	exitIf(err)
}

func exitIf(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "tpdecode:", err)
		os.Exit(1)
	}
	if os.Getenv(envRank) != "" {
		os.Exit(0) // a rank process does nothing else
	}
}

// result is one rank's timing.
type result struct {
	eager, replay time.Duration // per step
}

func runGoroutines(w io.Writer, ranks, steps int) error {
	g, err := symheap.NewGroup(ranks, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	res := make([]result, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[r], errs[r] = rank(g, r, steps)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	report(w, fmt.Sprintf("%d ranks as goroutines", ranks), steps, res)
	return nil
}

// runProcesses makes the group, starts one process per rank with every
// rank's heap file passed to it, and waits for them.
func runProcesses(w io.Writer, ranks, steps int) error {
	g, err := symheap.NewGroup(ranks, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	out := &lockedWriter{w: w} // the ranks' output is copied by one goroutine each
	var cmds []*exec.Cmd
	for r := range ranks {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), envRank+"="+strconv.Itoa(r), envRanks+"="+strconv.Itoa(ranks), envSteps+"="+strconv.Itoa(steps))
		cmd.ExtraFiles = g.Files() // fds 3, 4, …: the ranks' heaps, in rank order
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds = append(cmds, cmd)
	}
	var errs []error
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d ranks as processes: every result checked\n", ranks)
	return nil
}

// rankProcess is one rank in its own process, told its rank, the number
// of ranks and of steps by its parent's environment; the heaps' files are
// its fds 3, 4, ….
func rankProcess(w io.Writer) error {
	r, err1 := strconv.Atoi(os.Getenv(envRank))
	n, err2 := strconv.Atoi(os.Getenv(envRanks))
	steps, err3 := strconv.Atoi(os.Getenv(envSteps))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	files := make([]*os.File, n)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("heap-%d", i))
	}
	g, err := symheap.Attach(files, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	res, err := rank(g, r, steps)
	if err != nil {
		return fmt.Errorf("rank %d: %w", r, err)
	}
	fmt.Fprintf(w, "rank %d (pid %d): eager %v/step, replay %v/step\n", r, os.Getpid(), res.eager, res.replay)
	return nil
}

func report(w io.Writer, what string, steps int, res []result) {
	var eager, replay time.Duration
	for _, r := range res {
		eager, replay = max(eager, r.eager), max(replay, r.replay)
	}
	fmt.Fprintf(w, "%s, %d steps each way, every result checked against the host's reference\n", what, steps)
	fmt.Fprintf(w, "eager:  %v per step (slowest rank)\n", eager)
	fmt.Fprintf(w, "replay: %v per step (slowest rank), %.2fx\n", replay, float64(eager)/float64(replay))
}

// rank runs one rank: its own device (cpu driver) and allocator, its heap
// of the group, the step eagerly, then captured and replayed.
func rank(g *symheap.Group, r, steps int) (result, error) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 64 << 20})
	if err != nil {
		return result{}, err
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		return result{}, err
	}
	defer a.Close()
	h, err := g.Open(r, a, symheap.Options{CheckAllocs: true})
	if err != nil {
		return result{}, err
	}
	defer h.Close()
	m, err := newModel(h)
	if err != nil {
		return result{}, err
	}

	var res result
	start := time.Now()
	for s := range steps {
		m.token.Store(tokenAt(s))
		if err := m.step(); err != nil {
			return res, err
		}
		if err := m.check(s); err != nil {
			return res, fmt.Errorf("eager step %d: %w", s, err)
		}
	}
	res.eager = time.Since(start) / time.Duration(steps)

	graph, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, m.enqueue)
	if err != nil {
		return res, err
	}
	defer graph.Close()
	start = time.Now()
	for s := range steps {
		m.token.Store(tokenAt(steps + s)) // fresh tokens, the same graph
		if err := graph.Launch(); err != nil {
			return res, err
		}
		if err := a.Synchronize(); err != nil {
			return res, err
		}
		if err := m.check(steps + s); err != nil {
			return res, fmt.Errorf("replay %d: %w", s, err)
		}
	}
	res.replay = time.Since(start) / time.Duration(steps)
	if n := a.CaptureAllocCount(); n != 0 {
		return res, fmt.Errorf("the captured step allocated %d times", n)
	}
	return res, nil
}

func tokenAt(step int) int32 { return int32(step*7919%50000 + 1) }

// lockedWriter serializes writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
