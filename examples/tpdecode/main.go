// Command tpdecode is a tensor-parallel decode step over N ranks, captured
// once with its all-reduce and replayed with fresh tokens.
//
// A step writes the current token's features into the rank's heap,
// computes the rank's partial activations (an axpy, standing in for the
// rank's kernels), all-reduces them across ranks in the symmetric heap,
// derives the logits and reads them out. The step is written against
// symheap.Collectives only: on cpu it runs on the host heap (host
// functions), on cuda and hip on the device heap (this library's kernels).
// It is run eagerly, then captured once per rank and replayed; every
// result, eager or replayed, is checked against the host's reference.
//
//	go run ./examples/tpdecode                      # 4 ranks as goroutines, cpu
//	go run ./examples/tpdecode -procs               # 4 ranks as processes sharing memfd heaps
//	go run ./examples/tpdecode -backend=cuda        # goroutine ranks, one stream each, one GPU
//	go run ./examples/tpdecode -backend=cuda -procs # process ranks over CUDA IPC
//	go run ./examples/tpdecode -backend=cuda -devices=2 # goroutine ranks spread over 2 GPUs (peer access)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/internal/prog"
	_ "github.com/capalloc/capalloc/internal/prog" // registers the backends a -backend name may ask for
	"github.com/capalloc/capalloc/internal/rankheap"
	internalranks "github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/internal/syncbuf"
	"github.com/capalloc/capalloc/symheap"
)

const (
	hidden   = 4096 // activations per step, float32
	heapSize = 1 << 20
	envRank  = "TPDECODE_RANK" // set in a rank process: its rank
	envRanks = "TPDECODE_RANKS"
	envSteps = "TPDECODE_STEPS"
	envBack  = "TPDECODE_BACKEND"
	envDir   = "TPDECODE_EXCHANGE" // the device heap's file exchange
)

func main() {
	ranks := flag.Int("ranks", 4, "tensor-parallel ranks")
	steps := flag.Int("steps", 200, "decode steps in each mode")
	procs := flag.Bool("procs", false, "run the ranks as processes (cpu: memfd heaps passed to them; cuda, hip: IPC handles through a file exchange)")
	backend := flag.String("backend", "cpu", "backend of every rank (a backends name: cpu, cuda, hip)")
	devices := flag.Int("devices", 1, "spread the goroutine ranks over this many devices of the backend (rank r on device r mod N; cuda, hip)")
	flag.Parse()
	if os.Getenv(envRank) != "" {
		exitIf(rankProcess(os.Stdout))
	}
	var err error
	switch {
	case *procs && *devices != 1:
		err = errors.New("-devices spreads goroutine ranks over the devices of one process; with -procs give each process its device in -backend")
	case *procs:
		err = runProcesses(os.Stdout, *backend, *ranks, *steps)
	default:
		err = runGoroutines(os.Stdout, *backend, *ranks, *steps, *devices)
	}
	exitIf(err)
}

func exitIf(err error) {
	prog.ExitOnError("tpdecode", err)
	if os.Getenv(envRank) != "" {
		os.Exit(0) // a rank process does nothing else
	}
}

// result is one rank's timing.
type result struct {
	eager, replay time.Duration // per step
}

// runGoroutines runs ranks as goroutines of this process, rank r on
// device r mod devices of the backend (devices 1: the backend as given).
func runGoroutines(w io.Writer, backend string, ranks, steps, devices int) error {
	if devices < 1 || (devices > 1 && backend != "cuda" && backend != "hip") {
		return fmt.Errorf("-devices=%d: ranks spread over devices of cuda or hip (a bare backend name), not %q", devices, backend)
	}
	hs, err := rankheap.Local(ranks, heapSize)
	if err != nil {
		return err
	}
	defer hs.Group.Close()
	res := make([]result, ranks)
	errs := internalranks.Each(ranks, func(r int) error {
		b := backend
		if devices > 1 {
			b = fmt.Sprintf("%s:device=%d", backend, r%devices)
		}
		var err error
		res[r], err = rank(b, hs, r, steps)
		return err
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	what := fmt.Sprintf("%d ranks as goroutines on %s", ranks, backend)
	if devices > 1 {
		what += fmt.Sprintf(" over %d devices", devices)
	}
	report(w, what, steps, res)
	return nil
}

// runProcesses makes the group, starts one process per rank with every
// rank's heap file passed to it, and waits for them.
func runProcesses(w io.Writer, backend string, ranks, steps int) error {
	g, err := symheap.NewGroup(ranks, heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	dir, err := os.MkdirTemp("", "tpdecode-exchange")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	out := &syncbuf.Writer{W: w} // the ranks' output is copied by one goroutine each
	cmds := make([]*exec.Cmd, ranks)
	for r := range cmds {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), envRank+"="+strconv.Itoa(r), envRanks+"="+strconv.Itoa(ranks), envSteps+"="+strconv.Itoa(steps), envBack+"="+backend, envDir+"="+dir)
		cmd.ExtraFiles = g.Files() // fds 3, 4, …: the ranks' heaps, in rank order
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		cmds[r] = cmd
	}
	if err := errors.Join(internalranks.Processes(cmds)...); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d ranks as processes on %s: every result checked\n", ranks, backend)
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
	g, err := symheap.Attach(internalranks.InheritedFiles(n), heapSize)
	if err != nil {
		return err
	}
	defer g.Close()
	res, err := rank(os.Getenv(envBack), rankheap.Source{Group: g, Exchange: symheap.FileExchange(os.Getenv(envDir), n), Size: heapSize}, r, steps)
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

// rank runs one rank: its own device (a driver of the backend) and
// allocator, its heap, the step eagerly, then captured and replayed.
func rank(backend string, hs rankheap.Source, r, steps int) (result, error) {
	d, err := backends.OpenDriver(context.Background(), backend)
	if err != nil {
		return result{}, err
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		return result{}, err
	}
	defer a.Close()
	h, _, err := hs.Open(r, a, symheap.Options{CheckAllocs: true})
	if err != nil {
		return result{}, err
	}
	defer h.Close()
	m, err := newModel(h)
	if err != nil {
		return result{}, err
	}
	defer m.close(nil)

	var res result
	start := time.Now()
	for s := range steps {
		m.setToken(tokenAt(s))
		if err := m.step(); err != nil {
			return res, err
		}
		if err := m.check(tokenAt(s)); err != nil {
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
		tok := tokenAt(steps + s) // fresh tokens, the same graph
		m.setToken(tok)
		if err := graph.Launch(); err != nil {
			return res, err
		}
		if err := h.Synchronize(); err != nil {
			return res, err
		}
		if err := m.check(tok); err != nil {
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
