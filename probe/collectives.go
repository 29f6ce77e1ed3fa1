package probe

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// Collective rows: two ranks, each an allocator on the probed driver with
// a heap of one symmetric group. Each rank captures the row's body once;
// then, for every replay, both ranks get fresh inputs, replay at once, and
// their outputs must equal an eager run of the same body on the same
// inputs. They are probed only on backends that run collectives
// (symheap.Group.Open does not refuse them with errors.ErrUnsupported).

const (
	collRanks = 2
	collN     = 1024 // bytes per rank and chunk
)

// collEnv is one collective row's world.
type collEnv struct {
	as    []*alloc.Allocator
	heaps []*symheap.Heap
	in    symheap.Tensor // per-rank input, filled fresh for every round
	out   symheap.Tensor // what is compared
	work  symheap.Tensor // collective scratch sized for the row
	table []alloc.Buffer // naive_heap: the device copy of the peer table
	fresh func(r, k int) byte
}

type collOp struct {
	name string
	body func(c *collEnv, r int) error
}

func copyFn(h *symheap.Heap, dst, src symheap.Tensor) func() error {
	return func() error { copy(h.Bytes(dst), h.Bytes(src)); return nil }
}

var collOps = []collOp{
	{name: "heap_alloc_in_capture", body: func(c *collEnv, r int) error {
		h := c.heaps[r]
		t, err := h.Alloc(collN) // arithmetic only, in the capture
		if err != nil {
			return err
		}
		if err := h.Allocator().LaunchHostFunc(copyFn(h, t, c.in)); err != nil {
			return err
		}
		if err := h.AllReduce(t, symheap.Int32); err != nil {
			return err
		}
		return h.Allocator().LaunchHostFunc(copyFn(h, c.out, t))
	}},
	{name: "barrier", body: func(c *collEnv, r int) error {
		h := c.heaps[r]
		if err := h.Barrier(); err != nil {
			return err
		}
		return h.Allocator().LaunchHostFunc(copyFn(h, c.out, c.in))
	}},
	{name: "all_reduce", body: func(c *collEnv, r int) error {
		h := c.heaps[r]
		if err := h.Allocator().LaunchHostFunc(copyFn(h, c.work, c.in)); err != nil {
			return err
		}
		if err := h.AllReduce(c.work, symheap.Int32); err != nil {
			return err
		}
		return h.Allocator().LaunchHostFunc(copyFn(h, c.out, c.work))
	}},
	{name: "all_gather", body: func(c *collEnv, r int) error {
		return c.heaps[r].AllGather(c.in, c.out)
	}},
	{name: "reduce_scatter", body: func(c *collEnv, r int) error {
		return c.heaps[r].ReduceScatter(c.work, c.out, symheap.Int32)
	}},
	{name: "all_to_all", body: func(c *collEnv, r int) error {
		return c.heaps[r].AllToAll(c.work, c.out)
	}},
	// The contrast: a heap that re-publishes the peer base table to the
	// device at every allocation (a host-to-device copy from pageable
	// memory) cannot be captured, which is why symheap builds its table
	// once, at Open.
	{name: "naive_heap", body: func(c *collEnv, r int) error {
		table := make([]byte, 64) // peer bases, rebuilt on the host
		if err := c.as[r].Upload(c.table[r], 0, table); err != nil {
			return err
		}
		return c.heaps[r].AllReduce(c.in, symheap.Int32)
	}},
}

// CollectiveOps lists the collective rows, probed where the backend runs
// collectives.
func CollectiveOps() []string {
	names := make([]string, len(collOps))
	for i, op := range collOps {
		names[i] = op.name
	}
	return names
}

// runCollectives probes every collective row, handing each to row, or
// probes none when the backend cannot run them here (collectivesRun).
func runCollectives(drv alloc.Driver, mode alloc.CaptureMode, replays int, row func(Result)) error {
	if !collectivesRun(drv) {
		return nil
	}
	for _, op := range collOps {
		r := Result{Op: op.name, Mode: mode.String(), Backend: drv.Name()}
		v, err := probeCollective(drv, mode, op, replays)
		if v == "" {
			return fmt.Errorf("probe %s: %w", op.name, err)
		}
		r.Verdict = v
		if err != nil {
			r.Error = err.Error()
		}
		row(r)
	}
	return nil
}

// collectivesRun reports whether the collective rows are probed on drv:
// the backend runs collectives (symheap.Runs) and two ranks in one process
// (not symheap.OneRankPerProcess), since the probe's ranks share a process.
func collectivesRun(drv alloc.Driver) bool {
	return symheap.Runs(drv) && !symheap.OneRankPerProcess(drv)
}

// probeCollective returns an empty verdict only when the row could not be
// set up.
func probeCollective(drv alloc.Driver, mode alloc.CaptureMode, op collOp, replays int) (v Verdict, err error) {
	g, err := symheap.NewGroup(collRanks, 1<<20)
	if err != nil {
		return "", err
	}
	defer g.Close()
	c := &collEnv{fresh: func(r, k int) byte { return byte(17*r + 3*k + 1) }}
	defer func() {
		for _, h := range c.heaps {
			_ = h.Close()
		}
		for r, b := range c.table {
			_ = c.as[r].Free(b)
		}
		for _, a := range c.as {
			if cerr := a.Close(); cerr != nil && err == nil && v != "" {
				v, err = "", cerr
			}
		}
	}()
	for r := range collRanks {
		a, err := alloc.New(drv, alloc.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return "", err
		}
		c.as = append(c.as, a)
		h, err := g.Open(r, a, symheap.Options{Timeout: 5 * time.Second})
		if err != nil {
			return "", err
		}
		c.heaps = append(c.heaps, h)
		b, err := a.Alloc(64)
		if err != nil {
			return "", err
		}
		c.table = append(c.table, b)
	}
	// The same allocations on every rank: in, out and work of the sizes
	// the rows need.
	for _, h := range c.heaps {
		if c.in, err = h.Alloc(collN); err != nil {
			return "", err
		}
		if c.out, err = h.Alloc(collRanks * collN); err != nil {
			return "", err
		}
		if c.work, err = h.Alloc(collRanks * collN); err != nil {
			return "", err
		}
	}
	if op.name == "reduce_scatter" {
		c.out.Size = collN
	}
	if op.name == "all_reduce" || op.name == "barrier" || op.name == "heap_alloc_in_capture" {
		c.out.Size, c.work.Size = collN, collN
	}

	graphs := make([]*alloc.Graph, collRanks)
	defer func() {
		for _, gr := range graphs {
			if gr != nil {
				_ = gr.Close()
			}
		}
	}()
	for r := range collRanks { // captures one after the other: no rank waits in one
		gr, err := c.as[r].WithCapture(alloc.CaptureOptions{Mode: mode}, func() error { return op.body(c, r) })
		if err != nil {
			return NotCapturable, err
		}
		graphs[r] = gr
	}
	for k := range replays {
		got, err := c.round(k, func(r int) error { return graphs[r].Launch() })
		if err != nil {
			return "", err
		}
		want, err := c.round(k, func(r int) error { return op.body(c, r) })
		if err != nil {
			return "", err
		}
		for r := range collRanks {
			if j := FirstDiff(got[r], want[r]); j >= 0 {
				return WrongResult, fmt.Errorf("replay %d, rank %d: byte %d is %#x, an eager run gives %#x", k, r, j, got[r][j], want[r][j])
			}
		}
	}
	return Capturable, nil
}

// round fills every rank's inputs for round k, clears the outputs, runs
// launch on every rank at once, synchronizes, and returns the outputs.
func (c *collEnv) round(k int, launch func(r int) error) ([][]byte, error) {
	for r, h := range c.heaps {
		fill(h.Bytes(c.in), c.fresh(r, k))
		fill(h.Bytes(c.work), c.fresh(r, k)+0x40)
		clear(h.Bytes(c.out))
	}
	errs := make([]error, collRanks)
	var wg sync.WaitGroup
	for r := range collRanks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = launch(r); errs[r] == nil {
				errs[r] = c.as[r].Synchronize()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	outs := make([][]byte, collRanks)
	for r, h := range c.heaps {
		outs[r] = append([]byte(nil), h.Bytes(c.out)...)
	}
	return outs, nil
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v + byte(i%7)
	}
}

// OpsFor lists the rows Run gives for drv: Ops, then CollectiveOps where
// they are probed (collectivesRun).
func OpsFor(drv alloc.Driver) []string {
	if collectivesRun(drv) {
		return append(Ops(), CollectiveOps()...)
	}
	return Ops()
}
