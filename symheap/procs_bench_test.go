package symheap_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/symheap"
)

// Process ranks: the same collectives with each of 4 ranks a process (this
// test binary in rank mode) that received the group's memfds, mapped them
// at its own addresses and runs its own cpu driver. Each rank times b.N
// operations after a common start barrier; ns/op is the slowest rank's
// time per operation (process start-up excluded).
//
//	go test ./symheap -run '^$' -bench Procs -benchtime=300x -count 6

const (
	envBenchRank = "CAPALLOC_SYMHEAP_BENCH_RANK"
	envBenchOp   = "CAPALLOC_SYMHEAP_BENCH_OP" // barrier or allreduce
	envBenchSize = "CAPALLOC_SYMHEAP_BENCH_SIZE"
	envBenchMode = "CAPALLOC_SYMHEAP_BENCH_MODE" // eager or captured
	envBenchN    = "CAPALLOC_SYMHEAP_BENCH_N"
)

func TestMain(m *testing.M) {
	if os.Getenv(envBenchRank) != "" {
		if err := benchRank(); err != nil {
			fmt.Fprintln(os.Stderr, "rank:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func BenchmarkProcs(b *testing.B) {
	for _, op := range []struct {
		name, op string
		size     int64
	}{{"barrier", "barrier", 4096}, {"all_reduce_1KiB", "allreduce", 1 << 10}, {"all_reduce_1MiB", "allreduce", 1 << 20}} {
		for _, mode := range []string{"eager", "captured"} {
			b.Run(op.name+"/"+mode, func(b *testing.B) {
				benchProcs(b, op.op, op.size, mode)
			})
		}
	}
}

func benchProcs(b *testing.B, op string, size int64, mode string) {
	g, err := symheap.NewGroup(benchRanks, 4*size+4096)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmds := make([]*exec.Cmd, benchRanks)
	outs := make([]*bytes.Buffer, benchRanks)
	for r := range benchRanks {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), envBenchRank+"="+strconv.Itoa(r), envBenchOp+"="+op,
			envBenchSize+"="+strconv.FormatInt(size, 10), envBenchMode+"="+mode, envBenchN+"="+strconv.Itoa(b.N))
		cmd.ExtraFiles = g.Files()
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		cmds[r] = cmd
	}
	var slowest time.Duration
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			b.Fatalf("rank %d: %v\n%s", r, err, outs[r])
		}
		line := strings.TrimSpace(outs[r].String())
		ns, err := strconv.ParseInt(strings.TrimPrefix(line, "ns="), 10, 64)
		if err != nil {
			b.Fatalf("rank %d printed %q", r, line)
		}
		slowest = max(slowest, time.Duration(ns))
	}
	perOp := float64(slowest.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp, "ns/op")
	b.ReportMetric(float64(size)/perOp*1e3, "MB/s")
}

// benchRank is one rank process: attach, open, run N operations after a
// start barrier, print the time they took.
func benchRank() error {
	rank, _ := strconv.Atoi(os.Getenv(envBenchRank))
	size, _ := strconv.ParseInt(os.Getenv(envBenchSize), 10, 64)
	n, _ := strconv.Atoi(os.Getenv(envBenchN))
	files := make([]*os.File, benchRanks)
	for i := range files {
		files[i] = os.NewFile(uintptr(3+i), fmt.Sprintf("heap-%d", i))
	}
	g, err := symheap.Attach(files, 4*size+4096)
	if err != nil {
		return err
	}
	d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		return err
	}
	defer a.Close()
	h, err := g.Open(rank, a, symheap.Options{})
	if err != nil {
		return err
	}
	defer h.Close()
	x, err := h.Alloc(size)
	if err != nil {
		return err
	}
	launch := func() error { return h.Barrier() }
	if os.Getenv(envBenchOp) == "allreduce" {
		launch = func() error { return h.AllReduce(x, symheap.Float32) }
	}
	step := func() error {
		if err := launch(); err != nil {
			return err
		}
		return a.Synchronize()
	}
	if os.Getenv(envBenchMode) == "captured" {
		gr, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, launch)
		if err != nil {
			return err
		}
		defer gr.Close()
		step = func() error {
			if err := gr.Launch(); err != nil {
				return err
			}
			return a.Synchronize()
		}
	}
	// Warm up, then start together.
	if err := step(); err != nil {
		return err
	}
	if err := h.Barrier(); err != nil {
		return err
	}
	if err := a.Synchronize(); err != nil {
		return err
	}
	start := time.Now()
	for range n {
		if err := step(); err != nil {
			return err
		}
	}
	fmt.Printf("ns=%d\n", time.Since(start).Nanoseconds())
	return nil
}
