package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/step"
)

// stepProg is a step for the executor: Pre writes the step's input into a
// pinned buffer and, with a pageable upload (a producer that cannot be
// captured), the step number into a device buffer; Captured copies both
// into the output and downloads it to a pinned buffer; Post waits and
// checks the output against the step's input.
type stepProg struct {
	a          *alloc.Allocator
	n          int64
	in, out    *alloc.HostBuffer
	dIn, dOut  alloc.Buffer
	dTag       alloc.Buffer
	step       int
	pre, post  int
	hook       func() error // run at the top of Captured (a fault to inject)
	st         *step.Step
	mismatches int
}

func newStepProg(t *testing.T, a *alloc.Allocator) *stepProg {
	t.Helper()
	const n = 4096
	p := &stepProg{a: a, n: n}
	p.in, p.out = mustHost(t, a, n), mustHost(t, a, n)
	p.dIn, p.dOut, p.dTag = mustAlloc(t, a, n), mustAlloc(t, a, n), mustAlloc(t, a, 1)
	t.Cleanup(func() {
		// Runs before the allocator's leak check (registered later).
		assert.NoError(t, errors.Join(a.Free(p.dIn), a.Free(p.dOut), a.Free(p.dTag), p.in.Close(), p.out.Close()))
	})
	return p
}

func (p *stepProg) config() step.Config {
	return step.Config{Pre: p.preFn, Captured: p.captured, Post: p.postFn}
}

func (p *stepProg) preFn() error {
	p.pre++
	copy(p.in.Bytes(), pattern(int(p.n), uint64(p.step)+1))
	fill(p.out.Bytes(), 0)
	return p.a.Upload(p.dTag, 0, []byte{byte(p.step)})
}

// captured runs on WithCapture's goroutine while capturing: no require.
func (p *stepProg) captured() error {
	if p.hook != nil {
		if err := p.hook(); err != nil {
			return err
		}
	}
	a, n := p.a, p.n
	return errors.Join(
		a.UploadHost(p.dIn, 0, p.in, 0, n),
		a.Copy(p.dOut, 0, p.dIn, 0, n),
		a.Copy(p.dOut, 0, p.dTag, 0, 1),
		a.DownloadHost(p.out, 0, p.dOut, 0, n),
	)
}

func (p *stepProg) postFn() error {
	p.post++
	if err := p.a.Synchronize(); err != nil {
		return err
	}
	want := pattern(int(p.n), uint64(p.step)+1)
	want[0] = byte(p.step)
	if !bytes.Equal(want, p.out.Bytes()) {
		p.mismatches++
		return fmt.Errorf("step %d: %w", p.step, errStaleReplay)
	}
	return nil
}

// runSteps runs k steps, each with fresh data, requiring each correct.
func (p *stepProg) runSteps(t *testing.T, k int) {
	t.Helper()
	for range k {
		require.NoError(t, p.st.Run(), "step %d", p.step)
		p.step++
		requireState(t, p.a, alloc.StateNone)
	}
}

// start makes the step from cfg (p.config() as the rule adjusts it) and
// keeps it in p.
func (p *stepProg) start(t *testing.T, cfg step.Config) *step.Step {
	t.Helper()
	st, err := step.New(p.a, cfg)
	require.NoError(t, err)
	p.st = st
	return st
}

// stepExecutor: alloc/step's Step warms up eagerly, captures once and
// replays with fresh data every step; any capture failure falls back to
// eager steps whose results stay right, retried only as configured.
func (s *suite) stepExecutor(t *testing.T) {
	runRules(t,
		rule{"warmup_capture_replay", inEachMode(s.stepWarmsUpThenCapturesThenReplays)},
		rule{"stale_replay_is_caught", s.stepStaleReplayIsCaught},
		rule{"fallback", s.stepFallsBackOnEveryCaptureFault},
		rule{"registry_op_listed", s.stepListedRegistryOpNeverCaptures},
		rule{"lazy_workspace_refused_then_retried", s.stepLazyWorkspaceRefusedThenRetried},
		rule{"retry_after", s.stepRetriesEveryRetryAfterSteps},
		rule{"max_captures", s.stepTriesAtMostMaxCaptures},
		rule{"region_errors", s.stepRegionErrorsAreTheSteps},
		rule{"concurrent_runs_and_registry", s.stepSerializesRunsWhileRegistryFills},
	)
}

// stepWarmsUpThenCapturesThenReplays: WarmUp eager steps, one capture
// (whose step is its graph's first launch), replays after; Pre and Post
// run every step; Close releases the graph and is final.
func (s *suite) stepWarmsUpThenCapturesThenReplays(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	cfg := p.config()
	cfg.Mode, cfg.WarmUp = mode, 2
	st := p.start(t, cfg)
	before := e.spy.Snapshot()
	p.runSteps(t, 2)
	assert.Equal(t, step.Stats{Mode: step.ModeWarmUp, Steps: 2, WarmUps: 2}, st.Stats())
	assertCalls(t, e.spy, before, alloctest.MethodBeginCapture, 0)
	assert.Nil(t, st.Graph())
	p.runSteps(t, 1)
	assert.Equal(t, step.Stats{Mode: step.ModeCaptured, Steps: 3, WarmUps: 2, CapturesTried: 1, Captures: 1, Replays: 1}, st.Stats())
	require.NotNil(t, st.Graph())
	assert.Zero(t, st.Graph().CaptureAllocCount())
	assert.Equal(t, 1, e.a.Stats().LiveGraphs)
	p.runSteps(t, 5)
	assert.Equal(t, step.Stats{Mode: step.ModeCaptured, Steps: 8, WarmUps: 2, CapturesTried: 1, Captures: 1, Replays: 6}, st.Stats())
	assertCalls(t, e.spy, before, alloctest.MethodBeginCapture, 1)
	assertCalls(t, e.spy, before, alloctest.MethodGraphLaunch, 6)
	assert.Equal(t, 8, p.pre, "Pre runs every step")
	assert.Equal(t, 8, p.post, "Post runs every step")
	assert.NoError(t, st.Err())
	require.NoError(t, st.Close())
	assert.Zero(t, e.a.Stats().LiveGraphs, "Close releases the graph")
	assert.Nil(t, st.Graph())
	require.ErrorIs(t, st.Close(), alloc.ErrClosed)
	require.ErrorIs(t, st.Run(), alloc.ErrClosed)
}

// stepStaleReplayIsCaught: the check can fail. A Pre that stops
// refreshing the pinned input after the capture makes the replay's output
// stale, and Post's check says so.
func (s *suite) stepStaleReplayIsCaught(t *testing.T) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	cfg := p.config()
	cfg.WarmUp = 1
	cfg.Pre = func() error {
		if p.step < 2 {
			return p.preFn()
		}
		p.pre++
		fill(p.out.Bytes(), 0)
		return p.a.Upload(p.dTag, 0, []byte{byte(p.step)})
	}
	st := p.start(t, cfg)
	p.runSteps(t, 2) // warm-up, capture
	err := st.Run()  // replay on the last step's input
	require.ErrorIs(t, err, step.ErrRegion)
	require.ErrorIs(t, err, errStaleReplay)
	assert.Equal(t, 1, p.mismatches)
	assert.Equal(t, step.ModeCaptured, st.Stats().Mode)
	require.NoError(t, st.Close())
}

// stepFault is a way the step's capture fails with a capture error.
type stepFault struct {
	name  string
	cause error
	// countsFailedCapture: the allocator began a capture that failed
	// (Stats.FailedCapture); a driver that cannot begin one began none.
	countsFailedCapture bool
	arm                 func(e *env, p *stepProg, reg *step.Registry)
}

var stepFaults = []stepFault{
	{"refused_pageable_copy", alloc.ErrCaptureIncompatibleAllocation, true, func(e *env, p *stepProg, _ *step.Registry) {
		p.hook = func() error { return p.a.Upload(p.dTag, 0, []byte{byte(p.step)}) }
	}},
	{"sync_in_capture", alloc.ErrSyncDuringCapture, true, func(e *env, p *stepProg, _ *step.Registry) {
		p.hook = p.a.Synchronize
	}},
	{"invalidated", alloc.ErrCaptureInvalidated, true, func(e *env, p *stepProg, _ *step.Registry) {
		p.hook = func() error {
			if p.st.Capturing() {
				return invalidateCapture(e.spy, p.a)
			}
			return nil
		}
	}},
	{"unavailable", driver.ErrCaptureUnavailable, false, func(e *env, _ *stepProg, _ *step.Registry) {
		e.spy.FailBeginCapture(errNoCapture)
	}},
	{"registry_op", step.ErrNonCapturable, true, func(e *env, p *stepProg, reg *step.Registry) {
		reg.Add("cudnn.find")
		p.hook = func() error { return p.st.Op("cudnn.find") }
	}},
	{"panic", step.ErrCapturePanic, true, func(e *env, p *stepProg, _ *step.Registry) {
		p.hook = func() error {
			if p.st.Capturing() {
				panic("conformance: boom in the captured region")
			}
			return nil
		}
	}},
}

// stepFallsBackOnEveryCaptureFault: each fault fails the capture with a
// capture error; the step falls back to eager steps and does not retry
// without RetryAfter, its results stay right, the allocator is clean.
func (s *suite) stepFallsBackOnEveryCaptureFault(t *testing.T) {
	for _, f := range stepFaults {
		t.Run(f.name, func(t *testing.T) { s.stepFallsBackOn(t, f) })
	}
}

func (s *suite) stepFallsBackOn(t *testing.T, f stepFault) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	reg := &step.Registry{}
	cfg := p.config()
	cfg.WarmUp, cfg.Registry = 1, reg
	st := p.start(t, cfg)
	f.arm(e, p, reg)
	base, failed := usageOf(e.a), e.a.Stats().FailedCapture
	p.runSteps(t, 2) // warm-up, then the failed capture and its eager run
	got := st.Stats()
	assert.Equal(t, step.ModeEager, got.Mode)
	assert.Equal(t, 1, got.CapturesTried)
	assert.Zero(t, got.Captures)
	assert.Equal(t, 1, got.EagerRuns)
	require.ErrorIs(t, st.Err(), step.ErrCaptureFailed)
	require.ErrorIs(t, st.Err(), f.cause)
	assert.Equal(t, st.Err().Error(), got.FallbackReason)
	assert.NotContains(t, []string{"", "other"}, got.Reason, "a known reason names the fallback")
	assert.Nil(t, st.Graph())
	assert.Equal(t, base, usageOf(e.a), "the failed capture released everything")
	if f.countsFailedCapture {
		assert.Equal(t, failed+1, e.a.Stats().FailedCapture)
	}
	before := e.spy.Snapshot()
	p.runSteps(t, 4)
	assertCalls(t, e.spy, before, alloctest.MethodBeginCapture, 0)
	got = st.Stats()
	assert.Equal(t, 1, got.CapturesTried, "no retry without RetryAfter")
	assert.Equal(t, 5, got.EagerRuns)
	assert.Equal(t, 6, p.pre)
	assert.Equal(t, 6, p.post)
	require.NoError(t, st.Close())
}

// stepListedRegistryOpNeverCaptures: an op of Config.Ops in the registry
// means no capture is begun; the step runs eagerly and says why.
func (s *suite) stepListedRegistryOpNeverCaptures(t *testing.T) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	reg := &step.Registry{}
	reg.Add("cudnn.find")
	cfg := p.config()
	cfg.Registry, cfg.Ops = reg, []string{"gemm", "cudnn.find"}
	st := p.start(t, cfg)
	before := e.spy.Snapshot()
	p.runSteps(t, 3)
	assertCalls(t, e.spy, before, alloctest.MethodBeginCapture, 0)
	require.ErrorIs(t, st.Err(), step.ErrNonCapturable)
	assert.Equal(t, step.Stats{Mode: step.ModeEager, Steps: 3, CapturesTried: 1, EagerRuns: 3, FallbackReason: st.Err().Error(), Reason: "non-capturable-op"}, st.Stats())
	require.NoError(t, st.Close())
}

// stepLazyWorkspaceRefusedThenRetried: with RefuseLazyWorkspace a capture
// that allocates a workspace is discarded; the eager step reserves it, and
// the retry captures with nothing to warn of.
func (s *suite) stepLazyWorkspaceRefusedThenRetried(t *testing.T) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	p.hook = func() error { _, err := p.a.Workspace("conformance-step", 256); return err }
	cfg := p.config()
	cfg.RefuseLazyWorkspace, cfg.RetryAfter = true, 1
	st := p.start(t, cfg)
	p.runSteps(t, 1)
	require.ErrorIs(t, st.Err(), step.ErrLazyWorkspace)
	assert.Zero(t, e.a.Stats().LiveGraphs, "the graph with the lazy workspace was discarded")
	p.runSteps(t, 1) // eager: counts towards RetryAfter
	p.runSteps(t, 3) // captured: the workspace exists now
	got := st.Stats()
	assert.Equal(t, step.ModeCaptured, got.Mode)
	assert.Equal(t, 2, got.CapturesTried)
	assert.Equal(t, 1, got.Captures)
	assert.Equal(t, 3, got.Replays)
	assert.Empty(t, st.Graph().Warnings())
	require.NoError(t, st.Close())
	require.NoError(t, e.a.ReleaseWorkspace("conformance-step"))
}

// stepRetriesEveryRetryAfterSteps: after a fallback the capture is tried
// again every RetryAfter eager steps until one succeeds; Err keeps the
// last fallback's reason.
func (s *suite) stepRetriesEveryRetryAfterSteps(t *testing.T) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	failing := true
	p.hook = func() error {
		if failing {
			return p.a.Synchronize() // refused while capturing, fine eagerly
		}
		return nil
	}
	cfg := p.config()
	cfg.RetryAfter = 3
	st := p.start(t, cfg)
	p.runSteps(t, 4) // the failed capture, then 3 eager steps
	assert.Equal(t, 1, st.Stats().CapturesTried)
	assert.Equal(t, 4, st.Stats().EagerRuns)
	p.runSteps(t, 1) // retried, fails again
	assert.Equal(t, 2, st.Stats().CapturesTried)
	assert.Equal(t, step.ModeEager, st.Stats().Mode)
	failing = false
	p.runSteps(t, 3)
	assert.Equal(t, 2, st.Stats().CapturesTried, "the next retry waits RetryAfter steps again")
	p.runSteps(t, 3)
	got := st.Stats()
	assert.Equal(t, 3, got.CapturesTried)
	assert.Equal(t, 1, got.Captures)
	assert.Equal(t, 3, got.Replays)
	assert.Equal(t, step.ModeCaptured, got.Mode)
	require.ErrorIs(t, st.Err(), alloc.ErrSyncDuringCapture, "Err keeps the last fallback's reason")
	require.NoError(t, st.Close())
}

// stepTriesAtMostMaxCaptures: a capture that always fails is tried
// MaxCaptures times, however often RetryAfter comes round.
func (s *suite) stepTriesAtMostMaxCaptures(t *testing.T) {
	e := s.env(t)
	p := newStepProg(t, e.a)
	p.hook = p.a.Synchronize
	cfg := p.config()
	cfg.RetryAfter, cfg.MaxCaptures = 1, 2
	st := p.start(t, cfg)
	p.runSteps(t, 8)
	assert.Equal(t, 2, st.Stats().CapturesTried)
	assert.Equal(t, 8, st.Stats().EagerRuns)
	require.NoError(t, st.Close())
}

// stepRegionErrorsAreTheSteps: an error of the step's own functions fails
// that step (step.ErrRegion) and is no reason to fall back.
func (s *suite) stepRegionErrorsAreTheSteps(t *testing.T) {
	e := s.env(t)
	stepCapturedErrorIsNoFallback(t, e)
	stepPreErrorStopsBeforeTheRegion(t, e)
	stepPostErrorFailsTheStep(t, e)
}

// stepCapturedErrorIsNoFallback: a plain error of Captured while
// capturing is the step's, not a reason to fall back: the next step
// captures again.
func stepCapturedErrorIsNoFallback(t *testing.T, e *env) {
	p := newStepProg(t, e.a)
	var fail error
	p.hook = func() error { return fail }
	st := p.start(t, p.config())
	fail = errBoom
	err := st.Run()
	require.ErrorIs(t, err, step.ErrRegion)
	require.ErrorIs(t, err, errBoom)
	assert.NoError(t, st.Err())
	requireState(t, e.a, alloc.StateNone)
	assert.Zero(t, e.a.Stats().LiveGraphs)
	fail = nil
	p.runSteps(t, 2)
	assert.Equal(t, step.Stats{Mode: step.ModeCaptured, Steps: 2, CapturesTried: 2, Captures: 1, Replays: 2}, st.Stats())
	require.NoError(t, st.Close())
}

// stepPreErrorStopsBeforeTheRegion: Pre's error stops the step before the
// captured region runs.
func stepPreErrorStopsBeforeTheRegion(t *testing.T, e *env) {
	calls := 0
	st, err := step.New(e.a, step.Config{Pre: func() error { return errBoom }, Captured: func() error { calls++; return nil }})
	require.NoError(t, err)
	err = st.Run()
	require.ErrorIs(t, err, step.ErrRegion)
	require.ErrorIs(t, err, errBoom)
	assert.Zero(t, calls)
	require.NoError(t, st.Close())
}

// stepPostErrorFailsTheStep: Post's error fails the step, which is not
// counted.
func stepPostErrorFailsTheStep(t *testing.T, e *env) {
	st, err := step.New(e.a, step.Config{Captured: func() error { return nil }, Post: func() error { return errBoom }})
	require.NoError(t, err)
	require.ErrorIs(t, st.Run(), errBoom)
	assert.Zero(t, st.Stats().Steps)
	require.NoError(t, st.Close())
}

// stepSerializesRunsWhileRegistryFills: Runs from several goroutines are
// serialized (one capture, then replays); the registry is filled while
// steps run.
func (s *suite) stepSerializesRunsWhileRegistryFills(t *testing.T) {
	e := s.env(t)
	reg := &step.Registry{}
	var mu sync.Mutex
	count := 0
	b := mustAlloc(t, e.a, 256)
	st, err := step.New(e.a, step.Config{Registry: reg, Captured: func() error {
		mu.Lock()
		count++
		mu.Unlock()
		return e.a.Memset(b, 0, 1, 256)
	}})
	require.NoError(t, err)
	require.NoError(t, parallel(4, func(i int) error {
		var errs []error
		for j := range 10 {
			errs = append(errs, st.Run())
			reg.Add(fmt.Sprintf("op%d.%d", i, j))
			_ = reg.Contains("op0.0")
			_ = st.Stats()
		}
		return errors.Join(errs...)
	}))
	got := st.Stats()
	assert.Equal(t, 40, got.Steps)
	assert.Equal(t, 40, got.Replays, "one capture (and its launch), then replays")
	assert.Equal(t, 1, count, "the region ran once, while captured")
	assert.Len(t, reg.Names(), 40)
	require.NoError(t, st.Close())
	require.NoError(t, e.a.Free(b))
}
