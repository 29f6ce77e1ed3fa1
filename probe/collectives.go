package probe

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/ranks"
	"github.com/capalloc/capalloc/symheap"
)

// Collective rows: two ranks, each an allocator on the probed driver with
// a symmetric heap through symheap.Collectives: the host heap where the
// backend runs host-function collectives (cpu), the device heap where it
// has IPC memory and this library's kernels (cuda, hip). The rows are
// named after the probe that motivated the heap (a multi-GPU library whose
// collectives were all NOT CAPTURABLE because it re-published its peer
// table at every allocation). Each rank captures the row's body once;
// then, for every replay, both ranks get fresh inputs in pinned memory,
// replay at once, and their outputs must equal an eager run of the same
// body on the same inputs.

const (
	collRanks = 2
	collN     = 1024 // bytes per rank and chunk
)

// collEnv is one collective row's world.
type collEnv struct {
	as    []*alloc.Allocator
	heaps []symheap.Collectives
	in    symheap.Tensor // per-rank input, written fresh for every round
	work  symheap.Tensor // a second input, for the rows whose input is Ranks() chunks
	out   symheap.Tensor // what is compared
	inHB  []*alloc.HostBuffer
	wkHB  []*alloc.HostBuffer
	outHB []*alloc.HostBuffer
	table []alloc.Buffer // naive_heap: the device copy of the peer table
	meet  *hostBarrier   // host_barrier
	fresh func(r, k int) byte
	// all_to_all_v: the counts tensors and the send counts' staging
	send, recv symheap.Tensor
	cntHB      []*alloc.HostBuffer
}

type collOp struct {
	name string
	body func(c *collEnv, r int) error
}

// steps runs the row's body between writing the inputs and reading the
// output, so a replay moves the bytes as they are then.
func (c *collEnv) steps(r int, ops ...func(h symheap.Collectives) error) error {
	h := c.heaps[r]
	all := append([]func(symheap.Collectives) error{
		func(h symheap.Collectives) error { return h.Write(c.in, c.inHB[r], 0) },
		func(h symheap.Collectives) error { return h.Write(c.work, c.wkHB[r], 0) },
	}, ops...)
	all = append(all, func(h symheap.Collectives) error { return h.Read(c.outHB[r], 0, c.out) })
	for _, op := range all {
		if err := op(h); err != nil {
			return err
		}
	}
	return nil
}

func allReduce(c *collEnv, r int, alg symheap.Algorithm) error {
	return c.steps(r,
		func(h symheap.Collectives) error { return h.CopyLocal(c.out, c.in) },
		func(h symheap.Collectives) error { return h.AllReduceWith(c.out, symheap.Int32, alg) })
}

var collOps = []collOp{
	{name: "device_barrier", body: func(c *collEnv, r int) error {
		return c.steps(r,
			func(h symheap.Collectives) error { return h.Barrier() },
			func(h symheap.Collectives) error { return h.CopyLocal(c.out, c.in) })
	}},
	// The contrast: a barrier made of a host synchronize and a host-side
	// rendezvous. The synchronize is illegal in a capture.
	{name: "host_barrier", body: func(c *collEnv, r int) error {
		return c.steps(r,
			func(h symheap.Collectives) error {
				if err := h.Allocator().Synchronize(); err != nil {
					return err
				}
				c.meet.wait()
				return nil
			},
			func(h symheap.Collectives) error { return h.CopyLocal(c.out, c.in) })
	}},
	{name: "all_reduce_one_shot", body: func(c *collEnv, r int) error { return allReduce(c, r, symheap.OneShot) }},
	{name: "all_reduce_two_shot", body: func(c *collEnv, r int) error { return allReduce(c, r, symheap.TwoShot) }},
	{name: "all_gather", body: func(c *collEnv, r int) error {
		return c.steps(r, func(h symheap.Collectives) error { return h.AllGather(c.in, c.out) })
	}},
	{name: "reduce_scatter", body: func(c *collEnv, r int) error {
		return c.steps(r, func(h symheap.Collectives) error { return h.ReduceScatter(c.work, c.out, symheap.Int32) })
	}},
	{name: "all_to_all", body: func(c *collEnv, r int) error {
		return c.steps(r, func(h symheap.Collectives) error { return h.AllToAll(c.work, c.out) })
	}},
	{name: "all_to_all_v", body: allToAllV},
	// The copy-engine variants: the heap's barrier kernel around one
	// device-to-device copy per rank, which a capture records as memcpy
	// nodes between the peers' heap addresses.
	{name: "all_gather_copy_engine", body: func(c *collEnv, r int) error {
		return c.steps(r, func(h symheap.Collectives) error { return h.AllGatherWith(c.in, c.out, symheap.CopyEngine) })
	}},
	{name: "all_to_all_copy_engine", body: func(c *collEnv, r int) error {
		return c.steps(r, func(h symheap.Collectives) error { return h.AllToAllWith(c.work, c.out, symheap.CopyEngine) })
	}},
	// Point-to-point: each rank puts its input into the next rank's
	// output and signals it, then waits for the previous rank's signal
	// before reading its output. The waits count across replays.
	{name: "put_signal", body: func(c *collEnv, r int) error {
		next := (r + 1) % collRanks
		return c.steps(r,
			func(h symheap.Collectives) error { return h.Put(next, c.out, c.in) },
			func(h symheap.Collectives) error { return h.Signal(next, 0, 1) },
			func(h symheap.Collectives) error { return h.WaitSignal(0, 1) })
	}},
	{name: "heap_alloc_in_capture", body: func(c *collEnv, r int) error {
		h := c.heaps[r]
		t, err := h.Alloc(collN) // arithmetic only, in the capture
		if err != nil {
			return err
		}
		return c.steps(r,
			func(h symheap.Collectives) error { return h.CopyLocal(t, c.in) },
			func(h symheap.Collectives) error { return h.AllReduce(t, symheap.Int32) },
			func(h symheap.Collectives) error { return h.CopyLocal(c.out, t) })
	}},
	// The motivating failure: a heap that re-publishes the peer base
	// table to the device at every allocation (a host-to-device copy from
	// pageable memory) cannot be captured, which is why symheap builds
	// its table once, at open.
	{name: "naive_heap", body: func(c *collEnv, r int) error {
		table := make([]byte, 64) // peer bases, rebuilt on the host
		if err := c.as[r].Upload(c.table[r], 0, table); err != nil {
			return err
		}
		return allReduce(c, r, symheap.Auto)
	}},
}

// hostBarrier is a reusable rendezvous of collRanks goroutines.
type hostBarrier struct {
	mu    sync.Mutex
	n     int
	round chan struct{}
}

func (b *hostBarrier) wait() {
	b.mu.Lock()
	ch := b.round
	if b.n++; b.n == collRanks {
		b.n, b.round = 0, make(chan struct{})
		close(ch)
	}
	b.mu.Unlock()
	<-ch
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

// heapKind says which heap runs collectives on drv with two ranks in this
// process: "host", "device", or "" (none).
func heapKind(drv driver.Driver) string {
	switch {
	case symheap.Runs(drv) && !symheap.OneRankPerProcess(drv):
		return "host"
	case symheap.DeviceRuns(drv):
		if _, ok := drv.(driver.KernelLauncher); ok {
			return "device"
		}
	}
	return ""
}

// runCollectives probes every collective row, handing each to row, or
// probes none when the backend runs no collectives with two ranks in one
// process.
func runCollectives(drv driver.Driver, mode alloc.CaptureMode, replays int, row func(Result)) error {
	if heapKind(drv) == "" {
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

// openHeaps opens the two ranks' heaps on c.as.
func (c *collEnv) openHeaps(drv driver.Driver) (closeAll func() error, err error) {
	if heapKind(drv) == "host" {
		g, err := symheap.NewGroup(collRanks, 1<<20)
		if err != nil {
			return nil, err
		}
		var hs []*symheap.Heap
		closeAll = func() error {
			var errs []error
			for _, h := range hs {
				errs = append(errs, h.Close())
			}
			return errors.Join(append(errs, g.Close())...)
		}
		for r, a := range c.as {
			h, err := g.Open(r, a, symheap.Options{Timeout: 5 * time.Second})
			if err != nil {
				return nil, errors.Join(err, closeAll())
			}
			hs = append(hs, h)
			c.heaps = append(c.heaps, h)
		}
		return closeAll, nil
	}
	x := symheap.NewLocalExchange(collRanks)
	hs := make([]*symheap.DeviceHeap, collRanks)
	if err := eachRank(func(r int) (err error) {
		hs[r], err = symheap.OpenDevice(r, c.as[r], x, 1<<20, symheap.DeviceOptions{Timeout: 5 * time.Second})
		return err
	}); err != nil {
		return nil, err
	}
	closeAll = func() error { return eachRank(func(r int) error { return hs[r].Close() }) }
	for _, h := range hs {
		if err := h.CollectivesRun(); err != nil {
			return nil, errors.Join(err, closeAll())
		}
		c.heaps = append(c.heaps, h)
	}
	return closeAll, nil
}

// probeCollective returns an empty verdict only when the row could not be
// set up.
func probeCollective(drv driver.Driver, mode alloc.CaptureMode, op collOp, replays int) (v Verdict, err error) {
	c := &collEnv{fresh: func(r, k int) byte { return byte(17*r + 3*k + 1) }, meet: &hostBarrier{round: make(chan struct{})}}
	var closeHeaps func() error
	defer func() {
		if closeHeaps != nil {
			if cerr := closeHeaps(); cerr != nil && err == nil && v != "" {
				v, err = "", cerr
			}
		}
		for r, a := range c.as {
			for _, hb := range []*alloc.HostBuffer{c.inHB[r], c.wkHB[r], c.outHB[r]} {
				if hb != nil {
					_ = hb.Close()
				}
			}
			if r < len(c.table) {
				_ = a.Free(c.table[r])
			}
			if r < len(c.cntHB) {
				_ = c.cntHB[r].Close()
			}
			if cerr := a.Close(); cerr != nil && err == nil && v != "" {
				v, err = "", cerr
			}
		}
	}()
	for range collRanks {
		a, err := alloc.New(drv, alloc.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return "", err
		}
		c.as = append(c.as, a)
		c.inHB, c.wkHB, c.outHB = append(c.inHB, nil), append(c.wkHB, nil), append(c.outHB, nil)
	}
	if closeHeaps, err = c.openHeaps(drv); err != nil {
		return "", err
	}
	// The same allocations on every rank: in, work and out of the sizes
	// the rows need.
	outSize, workSize := int64(collRanks*collN), int64(collRanks*collN)
	switch op.name {
	case "reduce_scatter":
		outSize = collN
	case "device_barrier", "host_barrier", "all_reduce_one_shot", "all_reduce_two_shot", "put_signal", "heap_alloc_in_capture", "naive_heap":
		outSize = collN
	}
	for r, h := range c.heaps {
		if c.in, err = h.Alloc(collN); err != nil {
			return "", err
		}
		if c.work, err = h.Alloc(workSize); err != nil {
			return "", err
		}
		if c.out, err = h.Alloc(outSize); err != nil {
			return "", err
		}
		a := c.as[r]
		if c.inHB[r], err = a.HostAlloc(collN); err != nil {
			return "", err
		}
		if c.wkHB[r], err = a.HostAlloc(workSize); err != nil {
			return "", err
		}
		if c.outHB[r], err = a.HostAlloc(outSize); err != nil {
			return "", err
		}
		b, err := a.Alloc(64)
		if err != nil {
			return "", err
		}
		c.table = append(c.table, b)
		if err := c.allocCounts(r, h, a); err != nil {
			return "", err
		}
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
	for r := range c.heaps {
		fill(c.inHB[r].Bytes(), c.fresh(r, k))
		fill(c.wkHB[r].Bytes(), c.fresh(r, k)+0x40)
		clear(c.outHB[r].Bytes())
		c.fillCounts(r, k)
	}
	if err := eachRank(func(r int) error {
		if err := launch(r); err != nil {
			return err
		}
		return c.heaps[r].Synchronize()
	}); err != nil {
		return nil, err
	}
	outs := make([][]byte, collRanks)
	for r := range c.heaps {
		outs[r] = append([]byte(nil), c.outHB[r].Bytes()...)
	}
	return outs, nil
}

// eachRank runs fn for every rank at once, each in its own goroutine (a
// collective waits for its peers), and joins their errors.
func eachRank(fn func(r int) error) error { return errors.Join(ranks.Each(collRanks, fn)...) }

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v + byte(i%7)
	}
}

// OpsFor lists the rows Run gives for drv: Ops, then CollectiveOps where
// the backend runs collectives with two ranks in this process.
func OpsFor(drv driver.Driver) []string {
	if heapKind(drv) != "" {
		return append(Ops(), CollectiveOps()...)
	}
	return Ops()
}
