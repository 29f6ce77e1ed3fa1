// Package probe runs the capture probe matrix on a driver: for each
// operation an engine might put in its hot loop, whether it can be captured
// into a graph, proven the way a careful probe does (warm up eagerly,
// capture, reset outputs, write different inputs, replay, compare with an
// eager run). cmd/capprobe prints it; the conformance suite checks every
// row against CUDA's rules (Expected). It imports neither testing nor any
// test library, so tools can link it.
package probe

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Verdict is the probe's finding for one operation.
type Verdict string

const (
	// Capturable: captured, and every replay with fresh inputs matched an
	// eager run.
	Capturable Verdict = "CAPTURABLE"
	// NotCapturable: the capture was refused; the error says why.
	NotCapturable Verdict = "NOT_CAPTURABLE"
	// WrongResult: captured, but a replay disagreed with the eager run
	// (stale data, a dropped operation).
	WrongResult Verdict = "WRONG_RESULT"
)

// Result is one row of the capture probe matrix.
type Result struct {
	Op      string  `json:"op"`
	Verdict Verdict `json:"verdict"`
	Error   string  `json:"error"`
	Note    string  `json:"note,omitempty"`
	Mode    string  `json:"mode"`
	Backend string  `json:"backend"`
}

// probeN is the size of every probe buffer: large enough to cross size
// classes, small enough to be quick on any backend.
const probeN = 4096

// probeEnv is what one probe row works with: a fresh allocator, a pinned
// input and output, and a device buffer the harness refreshes eagerly before
// each run (for operations that read device memory).
type probeEnv struct {
	a       *alloc.Allocator
	drv     driver.Driver
	mode    alloc.CaptureMode
	in, out *alloc.HostBuffer
	src     alloc.Buffer   // holds the current input, uploaded eagerly
	dst     alloc.Buffer   // scratch the programs write through
	eager   bool           // body runs outside capture
	temps   []alloc.Buffer // allocated by an eager run, freed after it
	keep    []alloc.Buffer // eager memory a graph uses, freed at teardown
}

// probeOp is one row: body enqueues the operation under test so that out
// ends up depending on the input; external marks rows that capture behind
// the allocator's back instead of through WithCapture.
type probeOp struct {
	name     string
	body     func(e *probeEnv) error
	prepare  func(e *probeEnv) error // before the capture, once
	external bool
}

func (e *probeEnv) temp(b alloc.Buffer) alloc.Buffer {
	if e.eager {
		e.temps = append(e.temps, b)
	}
	return b
}

var probeOps = []probeOp{
	{name: "alloc", body: func(e *probeEnv) error {
		b, err := e.a.AllocSync(probeN)
		if err != nil {
			return err
		}
		if e.eager {
			e.temps = append(e.temps, b)
		} else {
			e.keep = append(e.keep, b) // eager memory the graph uses: freed after it
		}
		return roundTrip(e, b)
	}},
	{name: "alloc_async", body: func(e *probeEnv) error {
		b, err := e.a.Alloc(probeN)
		if err != nil {
			return err
		}
		return roundTrip(e, e.temp(b))
	}},
	{name: "free_async", body: func(e *probeEnv) error {
		b, err := e.a.Alloc(probeN)
		if err != nil {
			return err
		}
		if err := e.a.UploadHost(b, 0, e.in, 0, probeN); err != nil {
			return err
		}
		if err := e.a.Copy(e.dst, 0, b, 0, probeN); err != nil {
			return err
		}
		if err := e.a.Free(b); err != nil {
			return err
		}
		return e.a.DownloadHost(e.out, 0, e.dst, 0, probeN)
	}},
	{name: "upload_pinned", body: func(e *probeEnv) error { return roundTrip(e, e.dst) }},
	{name: "upload_pageable", body: func(e *probeEnv) error {
		if err := e.a.Upload(e.dst, 0, e.in.Bytes()); err != nil {
			return err
		}
		return e.a.DownloadHost(e.out, 0, e.dst, 0, probeN)
	}},
	{name: "download_pinned", body: func(e *probeEnv) error {
		return e.a.DownloadHost(e.out, 0, e.src, 0, probeN)
	}},
	{name: "memset", body: func(e *probeEnv) error {
		if err := e.a.Copy(e.dst, 0, e.src, 0, probeN); err != nil {
			return err
		}
		if err := e.a.Memset(e.dst, 0, 0x5a, probeN/2); err != nil {
			return err
		}
		return e.a.DownloadHost(e.out, 0, e.dst, 0, probeN)
	}},
	{name: "synchronize", body: func(e *probeEnv) error {
		if err := e.a.UploadHost(e.dst, 0, e.in, 0, probeN); err != nil {
			return err
		}
		if err := e.a.Synchronize(); err != nil {
			return err
		}
		return e.a.DownloadHost(e.out, 0, e.dst, 0, probeN)
	}},
	{name: "workspace_prealloc",
		prepare: func(e *probeEnv) error { _, err := e.a.Workspace("probe", probeN); return err },
		body: func(e *probeEnv) error {
			ws, err := e.a.Workspace("probe", probeN)
			if err != nil {
				return err
			}
			return roundTrip(e, ws)
		}},
	{name: "workspace_lazy", body: func(e *probeEnv) error {
		ws, err := e.a.Workspace("probe-lazy", probeN)
		if err != nil {
			return err
		}
		return roundTrip(e, ws)
	}},
	{name: "alloc_external_capture", external: true, body: func(e *probeEnv) error {
		b, err := e.a.Alloc(probeN)
		if err != nil {
			return err
		}
		return roundTrip(e, e.temp(b))
	}},
}

// roundTrip copies the pinned input through b into the pinned output.
func roundTrip(e *probeEnv, b alloc.Buffer) error {
	if err := e.a.UploadHost(b, 0, e.in, 0, probeN); err != nil {
		return err
	}
	return e.a.DownloadHost(e.out, 0, b, 0, probeN)
}

// Ops lists the probe's rows in order.
func Ops() []string {
	names := make([]string, len(probeOps))
	for i, op := range probeOps {
		names[i] = op.name
	}
	return names
}

// Expected is what CUDA's rules (and so every conforming backend)
// give for op in mode.
func Expected(op string, mode alloc.CaptureMode) Verdict {
	switch op {
	case "upload_pageable", "synchronize", "alloc_external_capture", "naive_heap", "host_barrier":
		return NotCapturable
	case "alloc": // cudaMalloc is legal only in a relaxed-mode capture
		if mode == alloc.Relaxed {
			return Capturable
		}
		return NotCapturable
	}
	return Capturable
}

// ExpectedFor is Expected on a device with info's capture safety: under
// strict safety (docs/capture-safety.md) cudaMalloc is refused during a
// capture of every mode, Relaxed included (GB10's table).
func ExpectedFor(info driver.DeviceInfo, op string, mode alloc.CaptureMode) Verdict {
	if op == "alloc" && info.CaptureSafety == driver.SafetyStrict {
		return NotCapturable
	}
	return Expected(op, mode)
}

// Run runs every row on drv in mode: each on a fresh allocator, each
// CAPTURABLE verdict proven by replays launches with fresh inputs compared
// with eager runs, then the collective rows (CollectiveOps) where the
// backend runs collectives. It fails only if the probe cannot set up at
// all.
func Run(drv driver.Driver, mode alloc.CaptureMode, replays int) ([]Result, error) {
	var out []Result
	err := Stream(drv, mode, replays, func(r Result) { out = append(out, r) })
	return out, err
}

// Stream runs the rows as Run does and hands each to row as soon as it
// is known, in OpsFor's order, so a caller can show progress: on a GPU a
// whole matrix takes long enough to look hung.
func Stream(drv driver.Driver, mode alloc.CaptureMode, replays int, row func(Result)) error {
	if replays < 1 {
		replays = 1
	}
	for _, op := range probeOps {
		r := Result{Op: op.name, Mode: mode.String(), Backend: drv.Name()}
		v, note, err := probeOne(drv, mode, op, replays)
		r.Verdict, r.Note = v, note
		if err != nil {
			r.Error = err.Error()
		}
		if v == "" {
			return fmt.Errorf("probe %s: %w", op.name, err)
		}
		row(r)
	}
	return runCollectives(drv, mode, replays, row)
}

// probeOne returns an empty verdict only when the row could not be set up.
func probeOne(drv driver.Driver, mode alloc.CaptureMode, op probeOp, replays int) (v Verdict, note string, err error) {
	// Warnings are reported in the row's note, not logged.
	a, err := alloc.New(drv, alloc.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return "", "", err
	}
	defer func() {
		if cerr := a.Close(); cerr != nil && v != "" && err == nil {
			v, err = "", fmt.Errorf("closing the probe allocator: %w", cerr)
		}
	}()
	e := &probeEnv{a: a, drv: drv, mode: mode}
	if err := e.setup(); err != nil {
		return "", "", err
	}
	defer e.teardown()
	if op.prepare != nil {
		if err := op.prepare(e); err != nil {
			return "", "", err
		}
	}

	g, err := e.capture(op)
	if err != nil {
		return NotCapturable, "", err
	}
	defer func() {
		if cerr := g.Close(); cerr != nil && err == nil {
			v, err = "", cerr
		}
	}()
	if w := g.Warnings(); len(w) > 0 {
		note = fmt.Sprintf("%v (CaptureAllocCount=%d)", w, g.CaptureAllocCount())
	}
	for i := 0; i < replays; i++ {
		got, want, err := e.replayAndEager(op, g, i)
		if err != nil {
			return "", note, err
		}
		if j := FirstDiff(got, want); j >= 0 {
			return WrongResult, note, fmt.Errorf("replay %d: byte %d is %#x, an eager run gives %#x (stale or dropped operation)", i, j, got[j], want[j])
		}
	}
	return Capturable, note, nil
}

func (e *probeEnv) setup() (err error) {
	if e.in, err = e.a.HostAlloc(probeN); err != nil {
		return err
	}
	if e.out, err = e.a.HostAlloc(probeN); err != nil {
		return err
	}
	if e.src, err = e.a.Alloc(probeN); err != nil {
		return err
	}
	e.dst, err = e.a.Alloc(probeN)
	return err
}

func (e *probeEnv) teardown() {
	for _, b := range append(e.temps, e.keep...) {
		_ = e.a.Free(b)
	}
	_ = e.a.Free(e.src)
	_ = e.a.Free(e.dst)
	_ = e.in.Close()
	_ = e.out.Close()
}

// capture records op's body, through WithCapture or, for external rows,
// through the driver directly.
func (e *probeEnv) capture(op probeOp) (*alloc.Graph, error) {
	if err := e.fill(0); err != nil {
		return nil, err
	}
	if !op.external {
		return e.a.WithCapture(alloc.CaptureOptions{Mode: e.mode}, func() error { return op.body(e) })
	}
	if err := e.drv.BeginCapture(e.a.Stream(), e.mode); err != nil {
		return nil, err
	}
	berr := op.body(e)
	h, err := e.drv.EndCapture(e.a.Stream())
	if err == nil {
		err = e.drv.GraphDestroy(h)
	}
	if berr != nil {
		return nil, berr
	}
	if err != nil {
		return nil, err
	}
	return nil, errors.New("operation was accepted during a capture the allocator did not start")
}

// fill writes input pattern i into the pinned input and the device source,
// and poisons the pinned output.
func (e *probeEnv) fill(i int) error {
	in := e.in.Bytes()
	for j := range in {
		in[j] = byte(j*7 + i*31 + 1)
	}
	if err := e.a.Upload(e.src, 0, in); err != nil {
		return err
	}
	out := e.out.Bytes()
	for j := range out {
		out[j] = 0xee
	}
	return nil
}

// replayAndEager launches g on input i, then runs the body eagerly on the
// same input, and returns both outputs.
func (e *probeEnv) replayAndEager(op probeOp, g *alloc.Graph, i int) (got, want []byte, err error) {
	if err := e.fill(i + 1); err != nil {
		return nil, nil, err
	}
	if err := g.Launch(); err != nil {
		return nil, nil, err
	}
	if err := e.a.Synchronize(); err != nil {
		return nil, nil, err
	}
	got = append([]byte(nil), e.out.Bytes()...)

	if err := e.fill(i + 1); err != nil {
		return nil, nil, err
	}
	e.eager = true
	err = op.body(e)
	e.eager = false
	if err == nil {
		err = e.a.Synchronize()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("eager run: %w", err)
	}
	want = append([]byte(nil), e.out.Bytes()...)
	for _, b := range e.temps {
		if err := e.a.Free(b); err != nil {
			return nil, nil, err
		}
	}
	e.temps = e.temps[:0]
	return got, want, nil
}

// FirstDiff is the index of the first byte where a and b differ, or -1 when
// they are equal: where a replay's output and an eager run's part.
func FirstDiff(a, b []byte) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	if len(b) > len(a) {
		return len(a)
	}
	return -1
}
