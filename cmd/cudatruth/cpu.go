package main

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// cpuVerdict runs c on a fresh cpu backend, the same way runTruthCase runs
// it on CUDA, through the Driver interface (no allocator, so no guard).
// The emulation has no OS threads: "same" and "other" both call as a
// thread in Global interaction mode, "other_relaxed" through
// WithInteractionMode(Relaxed). It has no legacy stream either, so the
// blocking and non-blocking cases run alike, and the synchronous pageable
// copy runs on the unrelated stream.
func cpuVerdict(c truthCase) (string, string) {
	d, err := cpu.New(cpu.Options{MemoryLimit: 64 << 20})
	if err != nil {
		return "error: " + err.Error(), ""
	}
	defer d.Close()
	failed, invalidated, err := cpuCase(d, c)
	if errors.Is(err, errNA) {
		return verdictNA, err.Error()
	}
	if err != nil {
		return "error: " + err.Error(), ""
	}
	return verdict(failed, invalidated), ""
}

func cpuCase(d *cpu.Driver, c truthCase) (failed, invalidated bool, err error) {
	must := func(e error) {
		if err == nil && e != nil {
			err = e
		}
	}
	var capS, otherS, scratch driver.Stream
	for _, s := range []*driver.Stream{&capS, &otherS, &scratch} {
		var e error
		*s, e = d.CreateStream()
		must(e)
	}
	dev0, e := d.Malloc(4096)
	must(e)
	dev1, e := d.Malloc(4096)
	must(e)
	pinned, e := d.HostAlloc(4096)
	must(e)
	pageable := make([]byte, 4096)
	capture := func(v byte) driver.GraphHandle {
		must(d.BeginCapture(scratch, alloc.ThreadLocal))
		must(d.MemsetAsync(dev1, v, 4096, scratch))
		g, e := d.EndCapture(scratch)
		must(e)
		return g
	}
	g, g2 := capture(2), capture(4)
	exec, e := d.GraphInstantiate(g, false)
	must(e)
	exec2, e := d.GraphInstantiate(g, false)
	must(e)
	poolPtr, e := d.MallocAsync(4096, otherS)
	must(e)
	managed, _, e := d.MallocManaged(4096)
	must(e)
	for _, s := range []driver.Stream{capS, otherS, scratch} {
		must(d.StreamSynchronize(s))
	}
	mode, e := driver.ParseCaptureMode(c.Mode)
	must(e)
	if err != nil {
		return false, false, fmt.Errorf("setup: %w", err)
	}
	if err := d.BeginCapture(capS, mode); err != nil {
		return false, false, fmt.Errorf("begin: %w", err)
	}
	if err := d.MemsetAsync(dev1, 1, 4096, capS); err != nil {
		return false, false, fmt.Errorf("captured memset: %w", err)
	}

	var v driver.Driver = d
	if c.Caller == "other_relaxed" {
		v = d.WithInteractionMode(alloc.Relaxed)
	}
	pre := preCapture{capS: capS, otherS: otherS, dev0: dev0, dev1: dev1, pinned: pinned, pageable: pageable,
		g: g, g2: g2, exec: exec, exec2: exec2, poolPtr: poolPtr, managed: managed}
	opErr := cpuOp(v, c.Op, pre)
	if errors.Is(opErr, errNA) {
		return false, false, opErr
	}
	st, e := d.StreamCaptureStatus(capS)
	if e != nil {
		return false, false, e
	}
	_, endErr := d.EndCapture(capS)
	return opErr != nil, st != driver.CaptureActive || endErr != nil, nil
}

// preCapture is what the ops work on, all made before the capture, as in
// runTruthCase.
type preCapture struct {
	capS, otherS     driver.Stream
	dev0, dev1       driver.DevicePtr
	pinned, pageable []byte
	g, g2            driver.GraphHandle
	exec, exec2      driver.GraphExec
	poolPtr          driver.DevicePtr
	managed          driver.DevicePtr // MallocManaged'd 4 KiB
}

func cpuOp(v driver.Driver, op string, p preCapture) error {
	capS, otherS, dev0, dev1, pinned, pageable, g, exec := p.capS, p.otherS, p.dev0, p.dev1, p.pinned, p.pageable, p.g, p.exec
	switch op {
	case "malloc":
		_, err := v.Malloc(4096)
		return err
	case "free_precapture":
		return v.Free(dev0)
	case "host_alloc":
		_, err := v.HostAlloc(4096)
		return err
	case "pool_alloc_capturing", "pool_alloc_other":
		s := capS
		if op == "pool_alloc_other" {
			s = otherS
		}
		p, err := v.MallocAsync(4096, s)
		if err != nil {
			return err
		}
		return v.FreeAsync(p, s)
	case "memset_other":
		return v.MemsetAsync(dev1, 3, 4096, otherS)
	case "copy_pinned_capturing":
		return v.CopyHtoDAsync(dev1, pinned, capS)
	case "copy_pageable_capturing":
		return v.CopyHtoDAsync(dev1, pageable, capS)
	case "copy_pageable_sync":
		return v.CopyHtoD(dev1, pageable, otherS)
	case "sync_capturing":
		return v.StreamSynchronize(capS)
	case "query_capturing":
		_, err := v.StreamQuery(capS)
		return err
	case "sync_other":
		return v.StreamSynchronize(otherS)
	case "query_other":
		_, err := v.StreamQuery(otherS)
		return err
	case "stream_create_destroy":
		s, err := v.CreateStream()
		if err != nil {
			return err
		}
		return v.DestroyStream(s)
	case "graph_instantiate":
		e, err := v.GraphInstantiate(g, false)
		if err != nil {
			return err
		}
		return v.GraphExecDestroy(e)
	case "graph_launch_capturing":
		return v.GraphLaunch(exec, capS)
	case "graph_launch_other":
		return v.GraphLaunch(exec, otherS)
	case "graph_exec_destroy":
		return v.GraphExecDestroy(p.exec2)
	case "graph_destroy":
		return v.GraphDestroy(p.g2)
	case "free_async_other":
		return v.FreeAsync(p.poolPtr, otherS)
	case "managed_alloc":
		mp, _, err := v.(driver.ManagedMemory).MallocManaged(4096)
		if err != nil {
			return err
		}
		return v.(driver.ManagedMemory).FreeManaged(mp)
	case "prefetch_capturing", "prefetch_other":
		s := capS
		if op == "prefetch_other" {
			s = otherS
		}
		return v.(driver.ManagedMemory).PrefetchManaged(p.managed, 4096, false, s)
	case "host_register":
		b := make([]byte, 4096)
		if _, err := v.(driver.HostRegisterer).HostRegister(b); err != nil {
			return err
		}
		return v.(driver.HostRegisterer).HostUnregister(b)
	case "event_query", "device_sync", "mem_get_info", "graph_mem_trim":
		return fmt.Errorf("%s: %w", op, errNA)
	}
	return fmt.Errorf("unknown op %q", op)
}

// relaxedByContract are the calls the Driver contract makes in Relaxed
// interaction mode (internal/gpurt/relaxed.go): the emulation never counts them as
// unsafe.
var relaxedByContract = map[string]bool{
	"pool_alloc_other": true, "free_async_other": true, "graph_instantiate": true, "graph_exec_destroy": true,
}

// knownDifference explains a difference between the runtime and the cpu
// backend that is understood and accepted, or returns "". Each reason says
// why the emulation does not follow; any other difference is a bug in the
// cpu backend (or a runtime that changed its rules: record it).
func knownDifference(c truthCase, cudaV, cpuV string) string {
	unsafeOp := map[string]bool{
		"malloc": true, "free_precapture": true, "host_alloc": true, "sync_other": true, "query_other": true,
		"pool_alloc_other": true, "graph_instantiate": true, "free_async_other": true,
		"graph_exec_destroy": true, "graph_destroy": true, "managed_alloc": true, "host_register": true,
	}
	switch {
	case c.Mode == "threadlocal" && c.Caller == "same" && unsafeOp[c.Op] &&
		cudaV == verdictInvalidates && cpuV == verdictOK:
		return "no OS threads in the emulation: ThreadLocal's rule for the capturing thread's own unsafe calls " +
			"cannot be told apart; alloc refuses an allocator's unsafe calls during its own capture in every mode, " +
			"and the cuda driver makes none on its capture thread"
	case relaxedByContract[c.Op] &&
		c.Caller != "other_relaxed" && cudaV == verdictInvalidates && cpuV == verdictOK:
		return "the Driver contract makes this call in Relaxed interaction mode (internal/gpurt/relaxed.go); " +
			"the runtime's own other_relaxed row for it is ok"
	case c.Op == "copy_pageable_capturing" && cudaV == verdictOK && cpuV == verdictInvalidates:
		return "CUDA 13 records a pageable async copy; the Driver contract takes only pinned memory for " +
			"*Async copies, and alloc refuses a pageable upload in capture before the driver (docs/design.md)"
	case c.Op == "copy_pageable_sync" && c.Blocking && cudaV == verdictInvalidates && cpuV == verdictOK:
		return "no legacy stream in the emulation: its streams act as non-blocking ones, the cuda default"
	}
	return ""
}
