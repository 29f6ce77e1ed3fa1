package main

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
	"github.com/capalloc/capalloc/cuda"
)

// cpuVerdict runs c on a fresh cpu backend, the same way RunTruthCase runs
// it on CUDA, through the Driver interface (no allocator, so no guard).
// The emulation has no OS threads: "same" and "other" both call as a
// thread in Global interaction mode, "other_relaxed" through
// WithInteractionMode(Relaxed). It has no legacy stream either, so the
// blocking and non-blocking cases run alike, and the synchronous pageable
// copy runs on the unrelated stream.
func cpuVerdict(c cuda.TruthCase) (string, string) {
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

func cpuCase(d *cpu.Driver, c cuda.TruthCase) (failed, invalidated bool, err error) {
	must := func(e error) {
		if err == nil && e != nil {
			err = e
		}
	}
	var capS, otherS, scratch alloc.Stream
	for _, s := range []*alloc.Stream{&capS, &otherS, &scratch} {
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
	must(d.BeginCapture(scratch, alloc.ThreadLocal))
	must(d.MemsetAsync(dev1, 2, 4096, scratch))
	g, e := d.EndCapture(scratch)
	must(e)
	exec, e := d.GraphInstantiate(g, false)
	must(e)
	for _, s := range []alloc.Stream{capS, otherS, scratch} {
		must(d.StreamSynchronize(s))
	}
	mode, e := alloc.ParseCaptureMode(c.Mode)
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

	var v alloc.Driver = d
	if c.Caller == "other_relaxed" {
		v = d.WithInteractionMode(alloc.Relaxed)
	}
	opErr := cpuOp(v, c.Op, capS, otherS, dev0, dev1, pinned, pageable, g, exec)
	if errors.Is(opErr, errNA) {
		return false, false, opErr
	}
	st, e := d.StreamCaptureStatus(capS)
	if e != nil {
		return false, false, e
	}
	_, endErr := d.EndCapture(capS)
	return opErr != nil, st != alloc.DriverCaptureActive || endErr != nil, nil
}

func cpuOp(v alloc.Driver, op string, capS, otherS alloc.Stream, dev0, dev1 alloc.DevicePtr,
	pinned, pageable []byte, g alloc.GraphHandle, exec alloc.GraphExec) error {
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
	case "event_query", "device_sync", "mem_get_info", "graph_mem_trim":
		return fmt.Errorf("%s: %w", op, errNA)
	}
	return fmt.Errorf("unknown op %q", op)
}

// knownDifference explains a difference between the runtime and the cpu
// backend that is understood and accepted, or returns "". Each entry says
// why the emulation cannot or need not follow; anything else is a bug in
// the cpu backend.
func knownDifference(c cuda.TruthCase, cudaV, cpuV string) string {
	return ""
}
