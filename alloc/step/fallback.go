package step

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// A step that falls back to running its captured region eagerly says so:
// a warning in the log, once per step and reason, naming the reason and
// what to do about it, and counters for the whole process (Totals: the
// metrics capalloc_step_fallbacks_total{step,reason} and
// capalloc_step_eager_runs_total{step} of alloc/allocprom). An engine can
// run eagerly forever without knowing otherwise: every Run returns nil.

// reason is a kind of failed capture: a short name for logs and metric
// labels (a bounded set), the error it is recognised by, and what an
// engine does about it.
type reason struct {
	name   string
	is     error
	advice string
}

// reasons are tried in order: an error wrapping several sentinels (a
// refused synchronize that also invalidated the capture) is named by the
// first. The last, "other", names what none of them matches.
var reasons = []reason{
	{"non-capturable-op", ErrNonCapturable, "an operation in the registry was asked for while capturing: move it to Pre, or leave it out of Captured"},
	{"lazy-workspace", ErrLazyWorkspace, "a workspace was first allocated inside the capture: reserve it (Allocator.Workspace) before capturing, in Pre or a warm-up step"},
	{"panic", ErrCapturePanic, "Captured panicked while it was captured: fix the panic"},
	{"sync-in-capture", alloc.ErrSyncDuringCapture, "Captured synchronizes (Synchronize, Query, a blocking copy): move that to Pre or Post"},
	{"incompatible-op", alloc.ErrCaptureIncompatibleAllocation, "Captured makes a call a capture refuses (a pageable Upload or Download, an eager allocation): use pinned host buffers (HostAlloc, UploadHost) and move the rest to Pre or Post"},
	{"timeout", alloc.ErrCaptureTimeout, "Captured ran past Config.Timeout: it must only enqueue work; raise the timeout if it does"},
	{"wrong-thread", driver.ErrCaptureWrongThread, "a call from another thread broke a ThreadLocal or Global capture: capture in Relaxed mode (Config.Mode) or keep the step's calls on one goroutine"},
	{"illegal-op", driver.ErrCaptureIllegalOp, "the driver refused an operation inside the capture: move it to Pre or Post"},
	{"already-capturing", alloc.ErrAlreadyCapturing, "another capture was active on the allocator's stream: capture one step at a time, or give the step its own allocator"},
	{"capture-unavailable", driver.ErrCaptureUnavailable, "the backend cannot capture: nothing in the step to fix; choose a backend that captures to replay graphs"},
	{"invalidated", alloc.ErrCaptureInvalidated, "the driver invalidated the capture: an operation in Captured is not capturable; move it to Pre or Post"},
}

var otherReason = reason{name: "other", advice: "see the error"}

// reasonOf names err, a capture error (IsCaptureError).
func reasonOf(err error) reason {
	for _, r := range reasons {
		if errors.Is(err, r.is) {
			return r
		}
	}
	return otherReason
}

// Totals is what every Step of one name (Config.Name) did since the
// process started: captures that failed and fell back, by reason name,
// and the region's eager runs after them. alloc/allocprom exports them.
type Totals struct {
	Step      string
	Fallbacks map[string]uint64 // by reason: "sync-in-capture", "incompatible-op", ...
	EagerRuns uint64
}

var totals struct {
	sync.Mutex
	byStep map[string]*Totals
}

// ProcessTotals returns every step name's Totals, sorted by name; the
// maps are the caller's.
func ProcessTotals() []Totals {
	totals.Lock()
	defer totals.Unlock()
	out := make([]Totals, 0, len(totals.byStep))
	for _, t := range totals.byStep {
		c := *t
		c.Fallbacks = maps.Clone(t.Fallbacks)
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y Totals) int { return cmp.Compare(x.Step, y.Step) })
	return out
}

// count adds to step name's totals.
func count(name, reason string, eager uint64) {
	totals.Lock()
	defer totals.Unlock()
	if totals.byStep == nil {
		totals.byStep = map[string]*Totals{}
	}
	t := totals.byStep[name]
	if t == nil {
		t = &Totals{Step: name, Fallbacks: map[string]uint64{}}
		totals.byStep[name] = t
	}
	if reason != "" {
		t.Fallbacks[reason]++
	}
	t.EagerRuns += eager
}

// failed records a failed capture of s, for reason r and cause err: the
// process's totals, and the log's warning the first time s fails for r
// (unless the failure is returned: Config.FallbackIsError).
func (s *Step) failed(r reason, err error) {
	count(s.name(), r.name, 0)
	if s.cfg.FallbackIsError {
		return
	}
	s.mu.Lock()
	first := !s.warned[r.name]
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	s.warned[r.name] = true
	s.mu.Unlock()
	if !first {
		return
	}
	retry := "never (Config.RetryAfter is 0)"
	if s.cfg.RetryAfter > 0 {
		retry = fmt.Sprintf("after %d eager steps", s.cfg.RetryAfter)
	}
	s.logger().Warn("capalloc/step: capture failed; the captured region runs eagerly",
		"step", s.name(), "reason", r.name, "what to do", r.advice, "retry", retry, "err", err.Error())
}

// name is the step's name in logs and metrics.
func (s *Step) name() string {
	if s.cfg.Name == "" {
		return "step"
	}
	return s.cfg.Name
}

func (s *Step) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger
	}
	return slog.Default()
}
