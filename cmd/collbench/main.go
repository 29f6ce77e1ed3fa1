// Command collbench times the device heap's collectives on one device,
// with goroutine ranks (one driver, allocator and stream each), against
// the device's own yardsticks measured in the same run. It is the
// collectives_bench step of the GPU kit (.ci/gpu; docs/gpu-kit.md).
//
// Every row is ONE collective per graph per rank, captured once and
// replayed many times back to back on every rank's stream (then one
// synchronize), so a row's time is the collective's latency as a replay
// pays it, not the pipelined throughput of many collectives inside one
// graph. Beside it, per row:
//
//   - over_empty: its time over an empty kernel's graph (axpy over zero
//     elements) replayed the same way on the same ranks;
//   - bw_over_copy: the device-memory traffic of all ranks per second
//     (every byte the kernels read and write) over a 256 MiB
//     device-to-device copy's (read + write);
//   - captured_over_eager: the same collective launched eagerly (back to
//     back, then one synchronize) over its replay: how much capture saves.
//
// busbw_GBps is NCCL's bus bandwidth (algorithm bandwidth times 2(n-1)/n
// for all-reduce, (n-1)/n for the others), for comparison with NCCL's
// tables; on one device the ranks share its memory, which the traffic
// ratio accounts for.
//
//	collbench -backend=cuda                  # every row, table on stdout
//	collbench -backend=cuda -json out.json   # and the figures as JSON
//	collbench -backend=cuda -small           # small sizes, few replays (over the fakes)
//	collbench -backend=cuda -info            # the device and runtime, as JSON
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends"
	_ "github.com/capalloc/capalloc/cpu"
	_ "github.com/capalloc/capalloc/cuda"
	_ "github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/collreport"
	"github.com/capalloc/capalloc/internal/kernels"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Case is one collective at one size.
type Case struct {
	Op    string // allreduce, allgather, reducescatter, alltoall, alltoallv
	Alg   string // oneshot, twoshot (allreduce only)
	Bytes int64  // the collective's size: the tensor (allreduce), the gathered output (allgather), the scattered input (reducescatter), each rank's input (alltoall, alltoallv)
	// Variant is "" for the heap's own kernel dispatch (the aligned
	// kernels: every tensor collbench allocates is 16-aligned), general:
	// the operands placed generalSkew bytes past 16-aligned offsets, which
	// the heap serves with its general kernels
	// (symheap/devcollectives.go), or copy: an all-gather or all-to-all
	// by the copy engines (symheap.CopyEngine; symheap/copyengine.go).
	// The kernel rows force symheap.Kernel, so Auto's copy-engine choice
	// (from the copy rows against them) never changes what they time.
	Variant string
}

// general is the Variant of the rows that time the general kernels;
// copyVariant that of the copy-engine rows.
const (
	general     = "general"
	copyVariant = collreport.CopyVariant
)

// generalSkew is how far a general row's operands lie past a 16-aligned
// offset: a whole float32, so every collective accepts them, and not a
// multiple of 16, so the heap cannot launch its aligned kernels.
const generalSkew = 4

func (c Case) String() string {
	s := c.Op + "/" + sizeName(c.Bytes)
	if c.Alg != "" {
		s = c.Op + "/" + c.Alg + "/" + sizeName(c.Bytes)
	}
	if c.Variant != "" {
		s += "/" + c.Variant
	}
	return s
}

// Row and Report are what -json writes (internal/collreport: the GPU
// kit's runner reads them back).
type (
	Row    = collreport.Row
	Report = collreport.Report
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// cases are the GPU kit's collectives matrix (docs/gpu-kit.md): every
// collective through the heap's dispatch (AllToAllV with uniform routing
// too: alltoallv.go), then every collective but AllToAllV again
// through the general kernels at the sizes that show the variants'
// difference (latency, the 1 MiB Auto crossover, bandwidth), then the
// all-gather and all-to-all by the copy engines at the kernel rows'
// sizes (Auto's copy-engine choice compares the two); small ones for
// -small.
func cases(small bool) []Case {
	var cs []Case
	ar := []int64{1 * KiB, 16 * KiB, 256 * KiB, 1 * MiB, 64 * MiB, 256 * MiB}
	other := []int64{1 * KiB, 1 * MiB, 64 * MiB, 256 * MiB}
	gen := []int64{1 * KiB, 1 * MiB, 64 * MiB}
	if small {
		ar, other, gen = []int64{1 * KiB, 16 * KiB}, []int64{1 * KiB}, []int64{1 * KiB}
	}
	ops := func(variant string, ar, other []int64) {
		for _, alg := range []string{"oneshot", "twoshot"} {
			for _, b := range ar {
				cs = append(cs, Case{Op: "allreduce", Alg: alg, Bytes: b, Variant: variant})
			}
		}
		for _, op := range []string{"allgather", "reducescatter", "alltoall"} {
			for _, b := range other {
				cs = append(cs, Case{Op: op, Bytes: b, Variant: variant})
			}
		}
	}
	ops("", ar, other)
	for _, b := range other { // counts read on the device, uniform routing (alltoallv.go)
		cs = append(cs, Case{Op: "alltoallv", Bytes: b})
	}
	ops(general, gen, gen)
	for _, op := range []string{"allgather", "alltoall"} {
		for _, b := range other {
			cs = append(cs, Case{Op: op, Bytes: b, Variant: copyVariant})
		}
	}
	return cs
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("collbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	backend := fs.String("backend", "cuda", "backend of every rank (cuda, hip)")
	ranksFlag := fs.String("ranks", "2,4,8", "rank counts, comma separated")
	small := fs.Bool("small", os.Getenv("CAPALLOC_GPU_SMALL") != "", "small sizes and few replays (the fakes; default from $CAPALLOC_GPU_SMALL)")
	budget := fs.Duration("per", 40*time.Millisecond, "time to spend on each measurement (sets the replay count)")
	only := fs.String("only", "", "run only cases whose name contains this")
	jsonOut := fs.String("json", "", "also write the figures as JSON to this file")
	info := fs.Bool("info", false, "print the device and runtime the backend opens, as JSON, and exit")
	peers := fs.Int("peers", 0, "print the peer-access matrix of devices 0..N-1 of the backend, as JSON, and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *info {
		return printInfo(*backend, stdout, stderr)
	}
	if *peers != 0 {
		return printPeers(*backend, *peers, stdout, stderr)
	}
	var ranks []int
	for _, s := range strings.Split(*ranksFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > kernels.MaxRanks {
			fmt.Fprintf(stderr, "collbench: -ranks: %q is not a rank count in 1..%d\n", s, kernels.MaxRanks)
			return 2
		}
		ranks = append(ranks, n)
	}
	var cs []Case
	for _, c := range cases(*small) {
		if strings.Contains(c.String(), *only) {
			cs = append(cs, c)
		}
	}
	rep := &Report{Backend: *backend, Small: *small, EmptyNs: map[int]float64{}}
	b := &bench{backend: *backend, small: *small, per: *budget}
	err := b.measure(rep, ranks, cs, stderr)
	if *jsonOut != "" {
		if werr := writeJSON(*jsonOut, rep); werr != nil {
			fmt.Fprintln(stderr, "collbench:", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "collbench:", err)
		return 1
	}
	printTable(stdout, rep)
	if rep.Failed > 0 {
		fmt.Fprintf(stderr, "collbench: %d row(s) failed\n", rep.Failed)
		return 1
	}
	return 0
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// printPeers opens devices 0..n-1 of backend and prints, as JSON, which
// can access which (driver.PeerAccess.CanAccessPeer; asked, not enabled):
// the P2P matrix a multi-GPU run records beside its figures.
func printPeers(backend string, n int, stdout, stderr io.Writer) int {
	if n < 1 || n > 64 {
		fmt.Fprintf(stderr, "collbench: -peers %d: want 1..64 devices\n", n)
		return 2
	}
	matrix := make([][]bool, n)
	for i := range n {
		opened, err := backends.OpenString(context.Background(), fmt.Sprintf("%s:device=%d", backend, i))
		if err != nil {
			fmt.Fprintln(stderr, "collbench:", err)
			return 1
		}
		pa, ok := opened.Driver.(driver.PeerAccess)
		if !ok {
			opened.Driver.Close()
			fmt.Fprintf(stderr, "collbench: backend %s has no peer access\n", backend)
			return 1
		}
		matrix[i] = make([]bool, n)
		for j := range n {
			if j == i {
				matrix[i][j] = true
				continue
			}
			if matrix[i][j], err = pa.CanAccessPeer(j); err != nil {
				opened.Driver.Close()
				fmt.Fprintln(stderr, "collbench:", err)
				return 1
			}
		}
		if err := opened.Driver.Close(); err != nil {
			fmt.Fprintln(stderr, "collbench:", err)
			return 1
		}
	}
	b, _ := json.Marshal(map[string]any{"backend": backend, "devices": n, "can_access_peer": matrix})
	fmt.Fprintln(stdout, string(b))
	return 0
}

// printInfo opens the backend and prints what it says of the device.
func printInfo(backend string, stdout, stderr io.Writer) int {
	opened, err := backends.OpenString(context.Background(), backend)
	if err != nil {
		fmt.Fprintln(stderr, "collbench:", err)
		return 1
	}
	d := opened.Driver
	defer d.Close()
	info := d.Info()
	out := map[string]any{
		"backend":        opened.Choice.String(),
		"device":         info.Name,
		"memory_bytes":   info.TotalMemory,
		"unified_memory": info.UnifiedMemory,
		"device_heap":    symheap.DeviceRuns(d),
	}
	switch r := d.(type) {
	case interface {
		Runtime() (string, int, int)
	}:
		out["library"], out["runtime_version"], out["driver_version"] = r.Runtime()
	case interface{ Runtime() (string, int) }:
		out["library"], out["runtime_version"] = r.Runtime()
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(stderr, "collbench:", err)
		return 1
	}
	return 0
}

type bench struct {
	backend string
	small   bool
	per     time.Duration
}

// replays is how many back-to-back replays fill the budget, given one
// took one; a few at least, 2000 at most (every replay of a heap's
// collective waits on every rank, so this bounds a row's time).
func (b *bench) replays(one time.Duration) int {
	if b.small {
		return 3
	}
	n := int(b.per / max(one, time.Microsecond))
	return min(max(n, 5), 2000)
}

// world is ranks goroutine ranks on one device, each with its heap.
type world struct {
	as    []*alloc.Allocator
	drvs  []driver.Driver
	heaps []*symheap.DeviceHeap
}

// close closes the heaps together (closing is a round of the exchange:
// one at a time, each would wait for the others), then the allocators.
func (w *world) close() {
	if w.heaps != nil {
		_ = w.each(func(r int) error {
			if w.heaps[r] == nil {
				return nil
			}
			return w.heaps[r].Close()
		})
	}
	for i, a := range w.as {
		_ = a.Close()
		_ = w.drvs[i].Close()
	}
}

func (w *world) each(fn func(r int) error) error {
	return errors.Join(ranks.Each(len(w.as), fn)...)
}

func (b *bench) open(ranks int, heap int64) (*world, string, error) {
	w := &world{}
	var name string
	for range ranks {
		opened, err := backends.OpenString(context.Background(), b.backend)
		if err != nil {
			w.close()
			return nil, "", err
		}
		a, err := alloc.New(opened.Driver, alloc.Options{Watchdog: time.Minute})
		if err != nil {
			_ = opened.Driver.Close()
			w.close()
			return nil, "", err
		}
		name = opened.Driver.Info().Name
		w.drvs, w.as = append(w.drvs, opened.Driver), append(w.as, a)
	}
	if !symheap.DeviceRuns(w.as[0].Driver()) {
		w.close()
		return nil, "", fmt.Errorf("%w: backend %s has no device heap", errors.ErrUnsupported, b.backend)
	}
	x := symheap.NewLocalExchange(ranks)
	w.heaps = make([]*symheap.DeviceHeap, ranks)
	if err := w.each(func(r int) (err error) {
		w.heaps[r], err = symheap.OpenDevice(r, w.as[r], x, heap, symheap.DeviceOptions{Timeout: time.Minute})
		return err
	}); err != nil {
		w.close()
		return nil, "", err
	}
	if err := w.heaps[0].CollectivesRun(); err != nil {
		w.close()
		return nil, "", err
	}
	return w, name, nil
}

// capture records body once on every rank.
func (w *world) capture(body func(r int) error) ([]*alloc.Graph, error) {
	gs := make([]*alloc.Graph, len(w.as))
	err := w.each(func(r int) (err error) {
		gs[r], err = w.as[r].WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error { return body(r) })
		return err
	})
	if err != nil {
		closeGraphs(gs)
		return nil, err
	}
	return gs, nil
}

func closeGraphs(gs []*alloc.Graph) {
	for _, g := range gs {
		if g != nil {
			_ = g.Close()
		}
	}
}

// timed runs step(r) n times back to back on every rank, then
// synchronizes every rank; the time per step.
func (w *world) timed(n int, step func(r int) error) (time.Duration, error) {
	start := time.Now()
	err := w.each(func(r int) error {
		for range n {
			if err := step(r); err != nil {
				return err
			}
		}
		return w.heaps[r].Synchronize()
	})
	return time.Since(start) / time.Duration(n), err
}

// measureOp times step, captured and eager: one call to calibrate, then
// the replay count the budget allows.
func (b *bench) measureOp(w *world, step func(r int) error) (captured, eager time.Duration, n int, err error) {
	gs, err := w.capture(step)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("capture: %w", err)
	}
	defer closeGraphs(gs)
	launch := func(r int) error { return gs[r].Launch() }
	one, err := w.timed(1, launch) // warm, calibrate
	if err != nil {
		return 0, 0, 0, fmt.Errorf("replay: %w", err)
	}
	n = b.replays(one)
	if captured, err = w.timed(n, launch); err != nil {
		return 0, 0, 0, fmt.Errorf("replay: %w", err)
	}
	if _, err = w.timed(1, step); err != nil {
		return 0, 0, 0, fmt.Errorf("eager: %w", err)
	}
	if eager, err = w.timed(n, step); err != nil {
		return 0, 0, 0, fmt.Errorf("eager: %w", err)
	}
	return captured, eager, n, nil
}

// emptyKernel is a step that launches the axpy kernel over no elements on
// rank r: the cheapest kernel of this library's module.
func emptyKernel(w *world) (func(r int) error, error) {
	mods := make([]*driver.Module, len(w.as))
	for r, a := range w.as {
		kl, ok := a.Driver().(driver.KernelLauncher)
		if !ok {
			return nil, fmt.Errorf("%w: the driver launches no kernels", errors.ErrUnsupported)
		}
		m, err := kl.LoadModule(kernels.Image())
		if err != nil {
			return nil, err
		}
		mods[r] = m
	}
	params := (&kernels.AxpyArgs{}).Encode(make([]byte, kernels.AxpySize))
	return func(r int) error {
		return w.as[r].Enqueue("empty kernel", nil, func(s driver.Stream) error {
			return w.as[r].Driver().(driver.KernelLauncher).LaunchKernel(mods[r].Kernels[kernels.Axpy], 1, 32, params, s)
		})
	}, nil
}

// copyBandwidth times a device-to-device copy on rank 0: read + write
// bytes per second.
func (b *bench) copyBandwidth(a *alloc.Allocator, size int64) (float64, error) {
	src, err := a.AllocSync(size)
	if err != nil {
		return 0, err
	}
	defer func() { _ = a.Free(src) }()
	dst, err := a.AllocSync(size)
	if err != nil {
		return 0, err
	}
	defer func() { _ = a.Free(dst) }()
	once := func(n int) (time.Duration, error) {
		start := time.Now()
		for range n {
			if err := a.Copy(dst, 0, src, 0, size); err != nil {
				return 0, err
			}
		}
		if err := a.Synchronize(); err != nil {
			return 0, err
		}
		return time.Since(start) / time.Duration(n), nil
	}
	one, err := once(1)
	if err != nil {
		return 0, err
	}
	per, err := once(min(b.replays(one), 50))
	if err != nil {
		return 0, err
	}
	return 2 * float64(size) / per.Seconds(), nil
}

// traffic is the device-memory bytes all n ranks' kernels read and write
// for one collective of case c (see the kernels'
// internal/kernels/collectives.cu and symheap/devcollectives.go).
func traffic(c Case, n int) float64 {
	s, N := float64(c.Bytes), float64(n)
	var perRank float64
	switch {
	case c.Op == "allreduce" && c.Alg == "oneshot":
		perRank = (N + 1) * s // reads every rank's tensor, writes its own
	case c.Op == "allreduce":
		perRank = s * (1 + 1/N + 2*(N-1)/N) // sums its share (reads S, writes S/N), gathers the rest
	case c.Op == "allgather":
		perRank = 2 * s // reads every chunk of the output's size, writes it
	case c.Op == "reducescatter":
		perRank = s + s/N // reads its chunk of every rank's input, writes one chunk
	default: // alltoall, alltoallv
		perRank = 2 * s
	}
	return N * perRank
}

// busBW is NCCL's bus bandwidth for c taking t on n ranks (NCCL's
// doc/PERFORMANCE.md: algbw = S/t; all-reduce ×2(n-1)/n, the others
// ×(n-1)/n with S the total size).
func busBW(c Case, n int, t time.Duration) float64 {
	algbw := float64(c.Bytes) / t.Seconds()
	if c.Op == "alltoall" || c.Op == "alltoallv" {
		algbw *= float64(n) // S is each rank's input; NCCL's S is the total
	}
	f := float64(n-1) / float64(n)
	if c.Op == "allreduce" {
		f *= 2
	}
	return algbw * f
}

// step is the collective of case c on rank r, its tensors in and out.
func step(w *world, c Case, ins, outs []symheap.Tensor) func(r int) error {
	h := func(r int) *symheap.DeviceHeap { return w.heaps[r] }
	switch c.Op {
	case "allreduce":
		alg := symheap.OneShot
		if c.Alg == "twoshot" {
			alg = symheap.TwoShot
		}
		return func(r int) error { return h(r).AllReduceWith(ins[r], symheap.Float32, alg) }
	case "allgather":
		return func(r int) error { return h(r).AllGatherWith(ins[r], outs[r], copyAlg(c)) }
	case "reducescatter":
		return func(r int) error { return h(r).ReduceScatter(ins[r], outs[r], symheap.Float32) }
	default:
		return func(r int) error { return h(r).AllToAllWith(ins[r], outs[r], copyAlg(c)) }
	}
}

// copyAlg is what moves an all-gather's or all-to-all's bytes in case c:
// the copy engines in a copy row, the kernels in every other.
func copyAlg(c Case) symheap.Algorithm {
	if c.Variant == copyVariant {
		return symheap.CopyEngine
	}
	return symheap.Kernel
}

// sizes are the in and out tensors' sizes of c on n ranks.
func sizes(c Case, n int) (in, out int64) {
	chunk := c.Bytes / int64(n) / 16 * 16
	switch c.Op {
	case "allreduce":
		return c.Bytes, 0
	case "allgather":
		return chunk, chunk * int64(n)
	case "reducescatter":
		return chunk * int64(n), chunk
	default:
		return chunk * int64(n), chunk * int64(n)
	}
}

func (b *bench) measure(rep *Report, ranks []int, cs []Case, log io.Writer) error {
	var heap int64 = 1 * MiB
	for _, c := range cs {
		in, out := sizes(c, 1)
		heap = max(heap, in+out+MiB) // the MiB covers the general rows' skew and the alignment of two allocations
	}
	rep.CopyBytes = 256 * MiB
	if b.small {
		rep.CopyBytes = 1 * MiB
	}
	for _, n := range ranks {
		w, name, err := b.open(n, heap)
		if errors.Is(err, driver.ErrBackendUnavailable) || errors.Is(err, errors.ErrUnsupported) {
			rep.SkipReason = err.Error()
			return err
		}
		if err != nil {
			return fmt.Errorf("%d ranks: %w", n, err)
		}
		rep.Device = name
		if rep.CopyGBps == 0 {
			bw, err := b.copyBandwidth(w.as[0], rep.CopyBytes)
			if err != nil {
				w.close()
				return fmt.Errorf("the copy's yardstick: %w", err)
			}
			rep.CopyGBps = bw / 1e9
			fmt.Fprintf(log, "device-to-device copy of %s: %.1f GB/s (read + write)\n", sizeName(rep.CopyBytes), rep.CopyGBps)
		}
		empty, err := emptyKernel(w)
		if err != nil {
			w.close()
			return fmt.Errorf("the empty kernel: %w", err)
		}
		emptyT, _, _, err := b.measureOp(w, empty)
		if err != nil {
			w.close()
			return fmt.Errorf("%d ranks: the empty kernel's graph: %w", n, err)
		}
		rep.EmptyNs[n] = float64(emptyT.Nanoseconds())
		fmt.Fprintf(log, "%d ranks: empty kernel graph replay %v\n", n, emptyT)
		for _, c := range cs {
			start := time.Now()
			row := b.row(w, c, n, emptyT, rep.CopyGBps)
			if row.Err != "" {
				rep.Failed++
				fmt.Fprintf(log, "%d ranks: %s: FAILED: %s\n", n, c, row.Err)
			} else {
				fmt.Fprintf(log, "%d ranks: %s: %v per replay, %v eager (%d replays, %v)\n", n, c,
					time.Duration(row.CapturedNs), time.Duration(row.EagerNs), row.Replays, time.Since(start).Round(time.Millisecond))
			}
			rep.Rows = append(rep.Rows, row)
			if w.heaps[0].Err() != nil { // a broken heap fails every later row
				break
			}
		}
		w.close()
	}
	return nil
}

// operands allocates case c's in and out tensors on every rank (out
// empty for all-reduce); a general row's lie generalSkew bytes into
// allocations that much larger.
func operands(w *world, c Case) (ins, outs []symheap.Tensor, err error) {
	n := len(w.heaps)
	inSize, outSize := sizes(c, n)
	var skew int64
	if c.Variant == general {
		skew = generalSkew
	}
	alloc := func(h *symheap.DeviceHeap, size int64) (symheap.Tensor, error) {
		t, err := h.Alloc(size + skew)
		t.Off, t.Size = t.Off+skew, size
		return t, err
	}
	ins, outs = make([]symheap.Tensor, n), make([]symheap.Tensor, n)
	for r, h := range w.heaps {
		if ins[r], err = alloc(h, inSize); err != nil {
			return nil, nil, err
		}
		if outSize > 0 {
			if outs[r], err = alloc(h, outSize); err != nil {
				return nil, nil, err
			}
		}
	}
	return ins, outs, nil
}

func (b *bench) row(w *world, c Case, n int, emptyT time.Duration, copyGBps float64) Row {
	row := Row{Ranks: n, Case: c.String(), Op: c.Op, Alg: c.Alg, Variant: c.Variant, Bytes: c.Bytes, EmptyNs: float64(emptyT.Nanoseconds())}
	fail := func(err error) Row { row.Err = err.Error(); return row }
	if err := w.each(func(r int) error { return w.heaps[r].Reset() }); err != nil {
		return fail(err)
	}
	ins, outs, err := operands(w, c)
	if err != nil {
		return fail(err)
	}
	st := step(w, c, ins, outs)
	if c.Op == "alltoallv" {
		if st, err = allToAllVStep(w, ins, outs); err != nil {
			return fail(err)
		}
	}
	captured, eager, reps, err := b.measureOp(w, st)
	if err != nil {
		return fail(err)
	}
	row.Replays = reps
	row.CapturedNs, row.EagerNs = float64(captured.Nanoseconds()), float64(eager.Nanoseconds())
	row.OverEmpty = row.CapturedNs / row.EmptyNs
	row.CapturedOverEag = row.EagerNs / row.CapturedNs
	row.BusBWGBps = busBW(c, n, captured) / 1e9
	row.TrafficGBps = traffic(c, n) / captured.Seconds() / 1e9
	row.BWOverCopy = row.TrafficGBps / copyGBps
	return row
}

func printTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "%s on %s; device-to-device copy %s: %.1f GB/s\n", rep.Backend, rep.Device, sizeName(rep.CopyBytes), rep.CopyGBps)
	ranks := make([]int, 0, len(rep.EmptyNs))
	for n := range rep.EmptyNs {
		ranks = append(ranks, n)
	}
	sort.Ints(ranks)
	for _, n := range ranks {
		fmt.Fprintf(w, "%d ranks: empty kernel graph replay %.0f ns\n", n, rep.EmptyNs[n])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ranks\tcase\treplays\tcaptured\teager\tover empty\tbusbw GB/s\ttraffic/copy\tcaptured/eager\t")
	for _, r := range rep.Rows {
		if r.Err != "" {
			fmt.Fprintf(tw, "%d\t%s\tFAILED: %s\t\t\t\t\t\t\t\n", r.Ranks, r.Case, r.Err)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%.2f\t%.1f\t%.2f\t%.2f\t\n", r.Ranks, r.Case, r.Replays,
			time.Duration(r.CapturedNs), time.Duration(r.EagerNs), r.OverEmpty, r.BusBWGBps, r.BWOverCopy, r.CapturedOverEag)
	}
	tw.Flush()
}

func sizeName(b int64) string {
	switch {
	case b >= MiB && b%MiB == 0:
		return fmt.Sprintf("%dMiB", b/MiB)
	case b >= KiB && b%KiB == 0:
		return fmt.Sprintf("%dKiB", b/KiB)
	}
	return fmt.Sprintf("%dB", b)
}
