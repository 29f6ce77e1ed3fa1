package main

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/ebitengine/purego"

	_ "github.com/capalloc/capalloc/cuda" // sets rawcuda.Open
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/rawcuda"
)

// The raw-behaviour probe: what the CUDA runtime itself does with one call
// made while a stream captures, with no capalloc guard in the way. main
// runs every case in a subprocess of its own (a case may hang or wreck the
// context) and compares the table with the cpu backend's rules. It makes
// its calls on the runtime the cuda backend loads (internal/rawcuda), not
// through the Driver.

// truthCase is one probe: a capture in Mode on the capturing thread, and
// Op issued by Caller while it is active.
type truthCase struct {
	Mode   string // global, threadlocal, relaxed
	Caller string // same (the capturing thread), other, other_relaxed (another thread in Relaxed interaction mode)
	Op     string // one of truthOps
	// Blocking creates the capturing and the unrelated stream with default
	// flags (they synchronize with the legacy stream) instead of
	// cudaStreamNonBlocking.
	Blocking bool
}

func (c truthCase) String() string {
	flags := "nonblocking"
	if c.Blocking {
		flags = "blocking"
	}
	return fmt.Sprintf("%s/%s/%s/%s", c.Mode, c.Caller, flags, c.Op)
}

// truthResult is what happened. Code is the op's cudaError_t (the first
// non-zero one for ops of two calls); StatusAfter the capturing stream's
// cudaStreamIsCapturing status right after it (0 none, 1 active, 2
// invalidated); EndCode cudaStreamEndCapture's code; Graph whether it
// returned a graph. Skipped says why the case could not run (a symbol
// missing from this runtime).
type truthResult struct {
	Case        truthCase
	Code        int
	CodeText    string
	StatusAfter int
	EndCode     int
	Graph       bool
	Skipped     string `json:",omitempty"`
}

// Invalidated reports whether the capture did not survive the call.
func (r truthResult) Invalidated() bool {
	return r.StatusAfter != statusActive || r.EndCode != 0 || !r.Graph
}

// statusActive is StatusAfter's "active": cudaStreamCaptureStatusActive
// (driver_types.h, as cuda/abi.go cites it), the value recorded results
// hold.
const statusActive = 1

// truthOps lists the probed operations.
var truthOps = []string{
	"malloc",                  // cudaMalloc
	"free_precapture",         // cudaFree of a pointer allocated before the capture
	"host_alloc",              // cudaHostAlloc
	"mem_get_info",            // cudaMemGetInfo
	"pool_alloc_capturing",    // cudaMallocFromPoolAsync + cudaFreeAsync on the capturing stream
	"pool_alloc_other",        // the same on an unrelated stream
	"memset_other",            // cudaMemsetAsync on an unrelated stream
	"copy_pinned_capturing",   // cudaMemcpyAsync HtoD from pinned memory on the capturing stream
	"copy_pageable_capturing", // cudaMemcpyAsync HtoD from pageable memory on the capturing stream
	"copy_pageable_sync",      // cudaMemcpy HtoD from pageable memory (legacy stream, synchronous)
	"sync_capturing",          // cudaStreamSynchronize of the capturing stream
	"query_capturing",         // cudaStreamQuery of the capturing stream
	"sync_other",              // cudaStreamSynchronize of an unrelated stream
	"query_other",             // cudaStreamQuery of an unrelated stream
	"event_query",             // cudaEventQuery of an event recorded on an unrelated stream before the capture
	"device_sync",             // cudaDeviceSynchronize
	"stream_create_destroy",   // cudaStreamCreateWithPriority + cudaStreamDestroy
	"graph_instantiate",       // cudaGraphInstantiateWithFlags of a graph captured before
	"graph_launch_capturing",  // cudaGraphLaunch of a pre-built graph into the capturing stream
	"graph_launch_other",      // cudaGraphLaunch of a pre-built graph into an unrelated stream
	"graph_mem_trim",          // cudaDeviceGraphMemTrim
	"graph_exec_destroy",      // cudaGraphExecDestroy of an exec instantiated before
	"graph_destroy",           // cudaGraphDestroy of a graph captured before
	"free_async_other",        // cudaFreeAsync, on an unrelated stream, of pool memory allocated before
	"managed_alloc",           // cudaMallocManaged (cudaMemAttachGlobal) + cudaFree
	"prefetch_capturing",      // cudaMemPrefetchAsync to the device, on the capturing stream, of managed memory allocated before
	"prefetch_other",          // the same on an unrelated stream
	"host_register",           // cudaHostRegister (portable, mapped) + cudaHostUnregister of pageable memory
}

// truthModes and truthCallers are the other two axes.
var (
	truthModes   = []string{"global", "threadlocal", "relaxed"}
	truthCallers = []string{"same", "other", "other_relaxed"}
)

// truthSyms are the calls the probe needs beyond the Driver's, resolved
// here so the Driver's binding list stays what it uses. Signatures
// (cuda_runtime_api.h, unchanged from CUDA 11.0 to 13):
//
//	cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
//	cudaEventCreate(cudaEvent_t *event)
//	cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
//	cudaEventQuery(cudaEvent_t event)
//	cudaEventDestroy(cudaEvent_t event)
//	cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
//	cudaDeviceSynchronize(void)
//	cudaDeviceGraphMemTrim(int device)
type truthSyms struct {
	exchangeMode, eventCreate, eventRecord, eventQuery, eventDestroy uintptr
	memcpy, deviceSynchronize, graphMemTrim                          uintptr
}

func truthSymbols(rt *rawcuda.Runtime) (truthSyms, error) {
	h, err := purego.Dlopen(rt.Path, purego.RTLD_NOW|purego.RTLD_LOCAL) // the loaded library again: same handle
	if err != nil {
		return truthSyms{}, fmt.Errorf("cuda: reopen %s: %w", rt.Path, err)
	}
	var s truthSyms
	for name, p := range map[string]*uintptr{
		"cudaThreadExchangeStreamCaptureMode": &s.exchangeMode,
		"cudaEventCreate":                     &s.eventCreate,
		"cudaEventRecord":                     &s.eventRecord,
		"cudaEventQuery":                      &s.eventQuery,
		"cudaEventDestroy":                    &s.eventDestroy,
		"cudaMemcpy":                          &s.memcpy,
		"cudaDeviceSynchronize":               &s.deviceSynchronize,
		"cudaDeviceGraphMemTrim":              &s.graphMemTrim,
	} {
		if addr, err := purego.Dlsym(h, name); err == nil {
			*p = addr
		}
	}
	return s, nil
}

// runTruthCase opens device 0 of the CUDA runtime the backend would load
// and runs c. The caller should run it in a process of its own: a case may
// hang, and one that succeeds may leave the context unusable.
func runTruthCase(c truthCase) (truthResult, error) {
	res := truthResult{Case: c}
	if !slices.Contains(truthOps, c.Op) || !slices.Contains(truthModes, c.Mode) || !slices.Contains(truthCallers, c.Caller) {
		return res, fmt.Errorf("cudatruth: unknown case %s", c)
	}
	r, err := rawcuda.Open()
	if err != nil {
		return res, err
	}
	// The Driver's own threads stay idle; the probe runs on two of its own.
	p := &truthProbe{rt: r, pool: r.Pool, dev: r.Device}
	if p.syms, err = truthSymbols(r); err != nil {
		return res, err
	}
	setDevice := func() error {
		return r.Check("make device current", "cudaSetDevice", gpurt.Call(r.SetDevice.Addr, uintptr(r.Device)))
	}
	capT, err := r.Vendor.StartThread(setDevice)
	if err != nil {
		return res, err
	}
	otherT, err := r.Vendor.StartThread(setDevice)
	if err != nil {
		return res, err
	}
	// Setup, the capture's begin and end: on the capturing thread.
	if err := capT.Do("setup", func() error { return p.setup(c) }); err != nil {
		return res, err
	}
	if msg := p.unavailable(c); msg != "" {
		res.Skipped = msg
		return res, nil
	}
	if c.Caller == "other_relaxed" {
		if err := otherT.Do("exchange mode", func() error {
			m := int32(gpurt.CaptureModeRelaxed)
			return r.Check("thread capture mode", "cudaThreadExchangeStreamCaptureMode", gpurt.Call(p.syms.exchangeMode, uintptr(unsafe.Pointer(&m))))
		}); err != nil {
			return res, err
		}
	}
	mode := map[string]uintptr{"global": gpurt.CaptureModeGlobal, "threadlocal": gpurt.CaptureModeThreadLocal, "relaxed": gpurt.CaptureModeRelaxed}[c.Mode]
	if err := capT.Do("begin", func() error {
		if err := r.Check("begin capture", "cudaStreamBeginCapture", gpurt.Call(r.StreamBeginCapture.Addr, p.capS, mode)); err != nil {
			return err
		}
		// One captured node, so that an empty graph never hides a result.
		return r.Check("memset", "cudaMemsetAsync", gpurt.Call(r.MemsetAsync.Addr, p.dev1, 1, 4096, p.capS))
	}); err != nil {
		return res, err
	}
	opThread := capT
	if c.Caller != "same" {
		opThread = otherT
	}
	_ = opThread.Do("op", func() error {
		res.Code = int(p.op(c.Op))
		return nil
	})
	res.CodeText = r.Text(int32(res.Code))
	_ = capT.Do("end", func() error {
		var st int32
		gpurt.Call(r.StreamIsCapturing.Addr, p.capS, uintptr(unsafe.Pointer(&st)))
		res.StatusAfter = int(st)
		var g uintptr
		res.EndCode = int(gpurt.Call(r.StreamEndCapture.Addr, p.capS, uintptr(unsafe.Pointer(&g))))
		res.Graph = g != 0
		return nil
	})
	return res, nil
}

// truthProbe holds what a case's op works on, all made before the capture.
type truthProbe struct {
	rt   *rawcuda.Runtime
	syms truthSyms
	pool uintptr
	dev  int

	capS, otherS uintptr // the capturing stream, an unrelated one
	dev0, dev1   uintptr // device buffers, 4 KiB each
	pinned       uintptr // cudaHostAlloc'd 4 KiB
	pageable     []byte
	event        uintptr
	exec         uintptr // a graph (one memset of dev1) instantiated before the capture
	graph        uintptr // a graph captured before, not instantiated
	exec2        uintptr // a second exec of graph, for the destroy case
	graph2       uintptr // a second captured graph, for the destroy case
	poolPtr      uintptr // pool memory allocated on otherS before the capture
	managed      uintptr // cudaMallocManaged'd 4 KiB, before the capture (0: the runtime lacks it)
	toRegister   []byte  // pageable memory for host_register
}

func (p *truthProbe) unavailable(c truthCase) string {
	need := map[string]uintptr{
		"event_query":        p.syms.eventQuery,
		"device_sync":        p.syms.deviceSynchronize,
		"copy_pageable_sync": p.syms.memcpy,
		"graph_mem_trim":     p.syms.graphMemTrim,
		"managed_alloc":      p.rt.MallocManaged.Addr,
		"prefetch_capturing": p.rt.MemPrefetchAsync.Addr | p.rt.MemPrefetchLocation.Addr,
		"prefetch_other":     p.rt.MemPrefetchAsync.Addr | p.rt.MemPrefetchLocation.Addr,
	}
	if (c.Op == "prefetch_capturing" || c.Op == "prefetch_other") && p.managed == 0 {
		return "the runtime lacks cudaMallocManaged"
	}
	if addr, ok := need[c.Op]; ok && addr == 0 {
		return "the runtime lacks the call for " + c.Op
	}
	if c.Op == "event_query" && p.event == 0 {
		return "the runtime lacks cudaEventCreate/cudaEventRecord"
	}
	if c.Caller == "other_relaxed" && p.syms.exchangeMode == 0 {
		return "the runtime lacks cudaThreadExchangeStreamCaptureMode"
	}
	return ""
}

func (p *truthProbe) setup(c truthCase) error {
	rt := p.rt
	flags := gpurt.StreamNonBlocking
	if c.Blocking {
		flags = 0
	}
	var scratch uintptr
	for _, s := range []*uintptr{&p.capS, &p.otherS, &scratch} {
		if err := rt.Check("create stream", "cudaStreamCreateWithPriority", gpurt.Call(rt.StreamCreateWithPriority.Addr, uintptr(unsafe.Pointer(s)), flags, 0)); err != nil {
			return err
		}
	}
	for _, b := range []*uintptr{&p.dev0, &p.dev1} {
		if err := rt.Check("malloc", "cudaMalloc", gpurt.Call(rt.Malloc.Addr, uintptr(unsafe.Pointer(b)), 4096)); err != nil {
			return err
		}
	}
	if err := rt.Check("host alloc", "cudaHostAlloc", gpurt.Call(rt.HostAlloc.Addr, uintptr(unsafe.Pointer(&p.pinned)), 4096, gpurt.HostAllocPortable)); err != nil {
		return err
	}
	p.pageable = make([]byte, 4096)
	p.toRegister = make([]byte, 4096)
	if rt.MallocManaged.Addr != 0 {
		if err := rt.Check("malloc managed", "cudaMallocManaged", gpurt.Call(rt.MallocManaged.Addr, uintptr(unsafe.Pointer(&p.managed)), 4096, gpurt.MemAttachGlobal)); err != nil {
			return err
		}
	}
	if p.syms.eventCreate != 0 && p.syms.eventRecord != 0 {
		if gpurt.Call(p.syms.eventCreate, uintptr(unsafe.Pointer(&p.event))) != 0 {
			p.event = 0
		} else if gpurt.Call(p.syms.eventRecord, p.event, p.otherS) != 0 {
			p.event = 0
		}
	}
	// Two graphs captured (ThreadLocal, on this thread) before the probed
	// capture, one memset of dev1 each: the first instantiated twice (for
	// the launches and the exec destroy case) and kept raw for the
	// instantiate case, the second for the destroy case.
	precapture := func(value uintptr, out *uintptr) error {
		if err := rt.Check("pre-capture begin", "cudaStreamBeginCapture", gpurt.Call(rt.StreamBeginCapture.Addr, scratch, gpurt.CaptureModeThreadLocal)); err != nil {
			return err
		}
		if err := rt.Check("pre-capture memset", "cudaMemsetAsync", gpurt.Call(rt.MemsetAsync.Addr, p.dev1, value, 4096, scratch)); err != nil {
			return err
		}
		return rt.Check("pre-capture end", "cudaStreamEndCapture", gpurt.Call(rt.StreamEndCapture.Addr, scratch, uintptr(unsafe.Pointer(out))))
	}
	if err := precapture(2, &p.graph); err != nil {
		return err
	}
	if err := precapture(4, &p.graph2); err != nil {
		return err
	}
	for _, e := range []*uintptr{&p.exec, &p.exec2} {
		if err := rt.Check("instantiate", "cudaGraphInstantiateWithFlags", gpurt.Call(rt.GraphInstantiateWithFlags.Addr, uintptr(unsafe.Pointer(e)), p.graph, 0)); err != nil {
			return err
		}
	}
	if err := rt.Check("pool alloc", "cudaMallocFromPoolAsync", gpurt.Call(rt.MallocFromPoolAsync.Addr, uintptr(unsafe.Pointer(&p.poolPtr)), 4096, p.pool, p.otherS)); err != nil {
		return err
	}
	for _, s := range []uintptr{p.capS, p.otherS, scratch} {
		if err := rt.Check("synchronize", "cudaStreamSynchronize", gpurt.Call(rt.StreamSynchronize.Addr, s)); err != nil {
			return err
		}
	}
	return nil
}

// op makes the probed gpurt.Call(s) and returns the first non-zero code. Go
// values whose address is passed are kept alive by call's uintptrescapes
// directive.
func (p *truthProbe) op(name string) int32 {
	rt := p.rt
	both := func(a, b func() int32) int32 {
		if c := a(); c != 0 {
			return c
		}
		return b()
	}
	switch name {
	case "malloc":
		var q uintptr
		return gpurt.Call(rt.Malloc.Addr, uintptr(unsafe.Pointer(&q)), 4096)
	case "free_precapture":
		return gpurt.Call(rt.Free.Addr, p.dev0)
	case "host_alloc":
		var q uintptr
		return gpurt.Call(rt.HostAlloc.Addr, uintptr(unsafe.Pointer(&q)), 4096, gpurt.HostAllocPortable)
	case "mem_get_info":
		var free, total uint64
		return gpurt.Call(rt.MemGetInfo.Addr, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))
	case "pool_alloc_capturing", "pool_alloc_other":
		s := p.capS
		if name == "pool_alloc_other" {
			s = p.otherS
		}
		var q uintptr
		return both(
			func() int32 {
				return gpurt.Call(rt.MallocFromPoolAsync.Addr, uintptr(unsafe.Pointer(&q)), 4096, p.pool, s)
			},
			func() int32 { return gpurt.Call(rt.FreeAsync.Addr, q, s) })
	case "memset_other":
		return gpurt.Call(rt.MemsetAsync.Addr, p.dev1, 3, 4096, p.otherS)
	case "copy_pinned_capturing":
		return gpurt.Call(rt.MemcpyAsync.Addr, p.dev1, p.pinned, 4096, gpurt.MemcpyHostToDevice, p.capS)
	case "copy_pageable_capturing":
		return gpurt.Call(rt.MemcpyAsync.Addr, p.dev1, uintptr(unsafe.Pointer(&p.pageable[0])), 4096, gpurt.MemcpyHostToDevice, p.capS)
	case "copy_pageable_sync":
		return gpurt.Call(p.syms.memcpy, p.dev1, uintptr(unsafe.Pointer(&p.pageable[0])), 4096, gpurt.MemcpyHostToDevice)
	case "sync_capturing":
		return gpurt.Call(rt.StreamSynchronize.Addr, p.capS)
	case "query_capturing":
		return gpurt.Call(rt.StreamQuery.Addr, p.capS)
	case "sync_other":
		return gpurt.Call(rt.StreamSynchronize.Addr, p.otherS)
	case "query_other":
		return gpurt.Call(rt.StreamQuery.Addr, p.otherS)
	case "event_query":
		return gpurt.Call(p.syms.eventQuery, p.event)
	case "device_sync":
		return gpurt.Call(p.syms.deviceSynchronize)
	case "stream_create_destroy":
		var s uintptr
		return both(
			func() int32 {
				return gpurt.Call(rt.StreamCreateWithPriority.Addr, uintptr(unsafe.Pointer(&s)), gpurt.StreamNonBlocking, 0)
			},
			func() int32 { return gpurt.Call(rt.StreamDestroy.Addr, s) })
	case "graph_instantiate":
		var e uintptr
		return gpurt.Call(rt.GraphInstantiateWithFlags.Addr, uintptr(unsafe.Pointer(&e)), p.graph, 0)
	case "graph_launch_capturing":
		return gpurt.Call(rt.GraphLaunch.Addr, p.exec, p.capS)
	case "graph_launch_other":
		return gpurt.Call(rt.GraphLaunch.Addr, p.exec, p.otherS)
	case "graph_mem_trim":
		return gpurt.Call(p.syms.graphMemTrim, uintptr(p.dev))
	case "graph_exec_destroy":
		return gpurt.Call(rt.GraphExecDestroy.Addr, p.exec2)
	case "graph_destroy":
		return gpurt.Call(rt.GraphDestroy.Addr, p.graph2)
	case "free_async_other":
		return gpurt.Call(rt.FreeAsync.Addr, p.poolPtr, p.otherS)
	case "managed_alloc":
		var q uintptr
		return both(
			func() int32 {
				return gpurt.Call(rt.MallocManaged.Addr, uintptr(unsafe.Pointer(&q)), 4096, gpurt.MemAttachGlobal)
			},
			func() int32 { return gpurt.Call(rt.Free.Addr, q) })
	case "prefetch_capturing":
		return p.prefetch(p.capS)
	case "prefetch_other":
		return p.prefetch(p.otherS)
	case "host_register":
		b := uintptr(unsafe.Pointer(&p.toRegister[0]))
		return both(
			func() int32 {
				return gpurt.Call(rt.HostRegister.Addr, b, 4096, gpurt.HostRegisterPortable|gpurt.HostRegisterMapped)
			},
			func() int32 { return gpurt.Call(rt.HostUnregister.Addr, b) })
	}
	panic("unreachable: checked in runTruthCase")
}

// prefetch is cudaMemPrefetchAsync of the managed buffer to the device on
// s, in the ABI the backend bound for this runtime's version (the device
// ordinal before CUDA 13, the location struct {type, id} by value and
// flags 0 from 13.0: gpurt.MemLocationArg).
func (p *truthProbe) prefetch(s uintptr) int32 {
	rt := p.rt
	if rt.MemPrefetchLocation.Addr != 0 {
		return gpurt.Call(rt.MemPrefetchLocation.Addr, p.managed, 4096, gpurt.MemLocationArg(gpurt.MemLocationTypeDevice, int32(p.dev)), 0, s)
	}
	return gpurt.Call(rt.MemPrefetchAsync.Addr, p.managed, 4096, uintptr(p.dev), s)
}
