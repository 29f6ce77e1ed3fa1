package step

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Sentinels. Every error this package returns wraps one of them (and, where
// the cause came from the allocator, the allocator's error too).
var (
	// ErrCaptureFailed: the captured region could not be captured; the
	// step ran it eagerly instead. Step.Err and Stats.FallbackReason keep
	// the latest one; it also wraps the cause (an alloc capture sentinel,
	// ErrNonCapturable, ErrLazyWorkspace or ErrCapturePanic).
	ErrCaptureFailed = errors.New("step: capture failed")
	// ErrNonCapturable: an operation recorded in the registry was asked
	// for in the captured region (Config.Ops, or Step.Op during the
	// capture). An engine's own error may wrap it to make the step fall
	// back.
	ErrNonCapturable = errors.New("step: operation is not capturable")
	// ErrLazyWorkspace: with Config.RefuseLazyWorkspace, the capture
	// allocated a workspace that was not reserved before it.
	ErrLazyWorkspace = errors.New("step: workspace first allocated inside the capture")
	// ErrCapturePanic: the captured region panicked while it was being
	// captured (the capture was ended first).
	ErrCapturePanic = errors.New("step: captured region panicked")
	// ErrRegion: Pre, Captured (eagerly or on replay) or Post failed; the
	// message names the region.
	ErrRegion = errors.New("step: region failed")
	// ErrInvalidConfig: New was given no allocator, no Captured function
	// or a negative count.
	ErrInvalidConfig = errors.New("step: invalid config")
)

// captureSentinels are the allocator's errors that say "this cannot be
// captured", not "this is wrong": a Captured region failing with one of
// them (or with ErrNonCapturable / ErrLazyWorkspace) falls back to eager.
var captureSentinels = []error{
	alloc.ErrCaptureIncompatibleAllocation,
	alloc.ErrSyncDuringCapture,
	alloc.ErrCaptureInvalidated,
	driver.ErrCaptureIllegalOp,
	driver.ErrCaptureWrongThread,
	driver.ErrCaptureUnavailable,
	alloc.ErrCaptureTimeout,
	alloc.ErrAlreadyCapturing,
	ErrNonCapturable,
	ErrLazyWorkspace,
	ErrCapturePanic,
}

// IsCaptureError reports whether err is a reason to run a step eagerly
// rather than a failure of the step itself.
func IsCaptureError(err error) bool {
	for _, s := range captureSentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// Config describes a step and how it is captured.
type Config struct {
	// Name names the step in the log's warnings and in the metrics
	// (Totals): "decode". Empty: "step".
	Name string
	// Logger receives the warning a fallback logs, once per reason; nil
	// means slog.Default().
	Logger *slog.Logger
	// FallbackIsError makes a failed capture Run's error (wrapping
	// ErrCaptureFailed and the cause) instead of a fallback: the region is
	// not run eagerly, and the next Run tries capturing again (within
	// MaxCaptures). It is still counted (Totals); nothing is logged, the
	// error is the caller's.
	FallbackIsError bool
	// Pre runs eagerly before the captured region at every step: the
	// producers that cannot be captured. Optional.
	Pre func() error
	// Captured is the region captured once and replayed. It must only
	// enqueue work on the allocator's stream (and read inputs from pinned
	// host buffers or device memory that Pre refreshed): while capturing,
	// it runs on another goroutine and its work is recorded, not run.
	Captured func() error
	// Post runs eagerly after the captured region at every step. Optional.
	Post func() error

	// Mode is the capture mode (alloc.Global by default).
	Mode alloc.CaptureMode
	// WarmUp is the number of eager runs of Captured before the capture
	// (lazy workspaces, autotuning and caches settle in them).
	WarmUp int
	// RetryAfter: after the step whose capture failed (it runs eagerly),
	// run this many more steps eagerly, then try capturing again. Zero:
	// never retry (eager from then on).
	RetryAfter int
	// MaxCaptures bounds the capture attempts; zero means no bound.
	MaxCaptures int
	// Timeout bounds a capture (alloc.CaptureOptions.Timeout).
	Timeout time.Duration
	// RefuseLazyWorkspace treats a workspace first allocated inside the
	// capture (the graph's warning) as a failed capture: the graph is
	// discarded and the step runs eagerly, which allocates the workspace
	// outside any capture, so a retry captures without it.
	RefuseLazyWorkspace bool
	// Ops names the operations Captured uses. If the registry holds one of
	// them, no capture is tried: the step falls back with ErrNonCapturable.
	Ops []string
	// Registry is where non-capturable names are looked up; nil means
	// Default.
	Registry *Registry
}

// Mode says how a step's captured region ran.
type Mode int

const (
	// ModeNone: no step has run yet.
	ModeNone Mode = iota
	// ModeWarmUp: an eager warm-up run before the capture.
	ModeWarmUp
	// ModeCaptured: captured (then launched) or replayed.
	ModeCaptured
	// ModeEager: run eagerly because a capture failed.
	ModeEager
)

func (m Mode) String() string {
	switch m {
	case ModeNone:
		return "none"
	case ModeWarmUp:
		return "warm-up"
	case ModeCaptured:
		return "captured"
	case ModeEager:
		return "eager"
	}
	return "unknown"
}

// Stats counts what a Step did.
type Stats struct {
	Mode          Mode // how the last step's captured region ran
	Steps         int  // steps run to completion
	WarmUps       int  // eager warm-up runs
	CapturesTried int  // capture attempts
	Captures      int  // attempts that gave a graph
	Replays       int  // launches of the graph, the capturing step's included
	EagerRuns     int  // eager runs after a failed capture
	// FallbackReason is the latest failed capture's error ("" if none);
	// Reason names its kind ("sync-in-capture", "incompatible-op", ...:
	// the metrics' reason label).
	FallbackReason string
	Reason         string
}

// Step runs an engine step as three regions: Pre eagerly, Captured warmed
// up then captured once and replayed, Post eagerly. A failed capture ends
// cleanly and the step runs eagerly. Run is serialized; Stats, Err, Op and
// Close may be called from any goroutine.
type Step struct {
	a   *alloc.Allocator
	cfg Config
	reg *Registry

	run       sync.Mutex // one step at a time
	capturing atomic.Bool

	mu        sync.Mutex // guards what follows
	graph     *alloc.Graph
	fallen    bool // a capture failed: eager until a retry
	sinceFail int  // eager runs since the last failure
	err       error
	stats     Stats
	closed    bool
	warned    map[string]bool // reasons logged already (fallback.go)
}

// New makes a step on a.
func New(a *alloc.Allocator, cfg Config) (*Step, error) {
	switch {
	case a == nil:
		return nil, fmt.Errorf("%w: nil allocator", ErrInvalidConfig)
	case cfg.Captured == nil:
		return nil, fmt.Errorf("%w: nil Captured function", ErrInvalidConfig)
	case cfg.WarmUp < 0 || cfg.RetryAfter < 0 || cfg.MaxCaptures < 0:
		return nil, fmt.Errorf("%w: negative WarmUp, RetryAfter or MaxCaptures", ErrInvalidConfig)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = Default
	}
	cfg.Ops = append([]string(nil), cfg.Ops...)
	return &Step{a: a, cfg: cfg, reg: reg}, nil
}

// Run runs one step: Pre, the captured region (warm-up, capture and
// launch, replay, or eager), Post. A failed capture is not an error of
// Run: the region runs eagerly and Err says why. Errors of the regions
// themselves wrap ErrRegion and the region's error.
func (s *Step) Run() error {
	s.run.Lock()
	defer s.run.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("step: Run: %w", alloc.ErrClosed)
	}
	if s.cfg.Pre != nil {
		if err := s.cfg.Pre(); err != nil {
			return fmt.Errorf("%w: Pre: %w", ErrRegion, err)
		}
	}
	if err := s.captured(); err != nil {
		return err
	}
	if s.cfg.Post != nil {
		if err := s.cfg.Post(); err != nil {
			return fmt.Errorf("%w: Post: %w", ErrRegion, err)
		}
	}
	s.mu.Lock()
	s.stats.Steps++
	s.mu.Unlock()
	return nil
}

// captured runs the middle region as the step's state says.
func (s *Step) captured() error {
	s.mu.Lock()
	g, st := s.graph, s.stats
	warm := st.WarmUps < s.cfg.WarmUp
	retry := s.cfg.RetryAfter > 0 && s.sinceFail >= s.cfg.RetryAfter &&
		(s.cfg.MaxCaptures == 0 || st.CapturesTried < s.cfg.MaxCaptures)
	eager := s.fallen && !retry
	spent := s.cfg.FallbackIsError && s.err != nil && s.cfg.MaxCaptures > 0 && st.CapturesTried >= s.cfg.MaxCaptures
	last := s.err
	s.mu.Unlock()
	switch {
	case g != nil:
		if err := g.Launch(); err != nil {
			return fmt.Errorf("%w: Captured (replay): %w", ErrRegion, err)
		}
		s.count(ModeCaptured, func(st *Stats) { st.Replays++ })
		return nil
	case warm:
		if err := s.cfg.Captured(); err != nil {
			return fmt.Errorf("%w: Captured (warm-up): %w", ErrRegion, err)
		}
		s.count(ModeWarmUp, func(st *Stats) { st.WarmUps++ })
		return nil
	case eager:
		return s.eager(true)
	case spent:
		return fmt.Errorf("%w: no capture attempt left (Config.MaxCaptures %d), the last: %w", ErrCaptureFailed, s.cfg.MaxCaptures, last)
	}
	return s.capture()
}

// capture tries to capture the region, then launches the graph, or falls
// back to running it eagerly.
func (s *Step) capture() error {
	s.mu.Lock()
	s.stats.CapturesTried++
	s.mu.Unlock()
	g, err := s.tryCapture()
	if err == nil {
		s.mu.Lock()
		s.graph, s.fallen, s.sinceFail = g, false, 0
		s.stats.Captures++
		s.mu.Unlock()
		if err := g.Launch(); err != nil {
			return fmt.Errorf("%w: Captured (first launch): %w", ErrRegion, err)
		}
		s.count(ModeCaptured, func(st *Stats) { st.Replays++ })
		return nil
	}
	if !IsCaptureError(err) {
		// The region's own failure, not the capture's: report it; the
		// next step tries capturing again.
		return fmt.Errorf("%w: Captured (capturing): %w", ErrRegion, err)
	}
	why := reasonOf(err)
	reason := fmt.Errorf("%w (%s: %s): %w", ErrCaptureFailed, why.name, why.advice, err)
	s.mu.Lock()
	s.err = reason
	s.stats.FallbackReason, s.stats.Reason = reason.Error(), why.name
	if !s.cfg.FallbackIsError {
		s.fallen, s.sinceFail = true, 0
	}
	s.mu.Unlock()
	s.failed(why, err)
	if s.cfg.FallbackIsError {
		return reason
	}
	if err := s.eager(false); err != nil {
		if errors.Is(err, ErrRegion) {
			return err // it ran eagerly, and failed
		}
		return fmt.Errorf("%w (not run eagerly: %w)", reason, err)
	}
	return nil
}

// tryCapture captures the region, turning a panic, a registered op and a
// lazy workspace into errors. The allocator is out of capture when it
// returns (WithCapture ends the capture before re-raising a panic).
func (s *Step) tryCapture() (g *alloc.Graph, err error) {
	for _, op := range s.cfg.Ops {
		if s.reg.Contains(op) {
			return nil, fmt.Errorf("%w: %q is in the registry", ErrNonCapturable, op)
		}
	}
	s.capturing.Store(true)
	defer s.capturing.Store(false)
	defer func() {
		if p := recover(); p != nil {
			g, err = nil, fmt.Errorf("%w: %v", ErrCapturePanic, p)
		}
	}()
	g, err = s.a.WithCapture(alloc.CaptureOptions{Mode: s.cfg.Mode, Timeout: s.cfg.Timeout}, s.cfg.Captured)
	if err != nil {
		return nil, err
	}
	if w := g.Warnings(); s.cfg.RefuseLazyWorkspace && len(w) > 0 {
		cerr := g.Close()
		return nil, errors.Join(fmt.Errorf("%w: %v", ErrLazyWorkspace, w), cerr)
	}
	return g, nil
}

// eager runs the region eagerly after a failed capture; later says it is
// a step after the failed one, which counts towards RetryAfter.
//
// It runs only on an allocator with no capture: an abandoned capture (a
// timeout: it ends when its function returns) or another open one would
// refuse the eager work, or record it. Then it returns an error wrapping
// ErrCaptureFailed and runs nothing; a later step tries again.
func (s *Step) eager(later bool) error {
	if cs, serr := s.a.CaptureStatus(); serr != nil || cs != alloc.StateNone {
		return fmt.Errorf("%w: the allocator is in capture state %v (%v): the region is not run eagerly into it", ErrCaptureFailed, cs, serr)
	}
	if err := s.cfg.Captured(); err != nil {
		return fmt.Errorf("%w: Captured (eager): %w", ErrRegion, err)
	}
	s.count(ModeEager, func(st *Stats) {
		st.EagerRuns++
		if later {
			s.sinceFail++
		}
	})
	count(s.name(), "", 1)
	return nil
}

// count records how the region ran.
func (s *Step) count(m Mode, f func(*Stats)) {
	s.mu.Lock()
	s.stats.Mode = m
	f(&s.stats)
	s.mu.Unlock()
}

// Op reports whether the operation name may run where the step is: it
// returns an error wrapping ErrNonCapturable when the step is capturing
// and name is in the registry, nil otherwise. An engine calls it at the
// top of an operation inside Captured and returns its error: the capture
// then fails cleanly and the step runs eagerly.
func (s *Step) Op(name string) error {
	if s.capturing.Load() && s.reg.Contains(name) {
		return fmt.Errorf("%w: %q is in the registry", ErrNonCapturable, name)
	}
	return nil
}

// Capturing reports whether the captured region is being captured now.
func (s *Step) Capturing() bool { return s.capturing.Load() }

// Err is the latest failed capture's reason (wrapping ErrCaptureFailed and
// the cause), or nil if none failed. A later capture that succeeds (a
// retry) leaves it in place: Stats.Mode says how steps run now.
func (s *Step) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Stats returns the step's counters.
func (s *Step) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Graph is the captured graph, or nil before the capture, after a failed
// one, or after Close.
func (s *Step) Graph() *alloc.Graph {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.graph
}

// Close releases the graph. It waits for a step in progress. A second
// Close, and Run after Close, return errors wrapping alloc.ErrClosed.
func (s *Step) Close() error {
	s.run.Lock()
	defer s.run.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("step: Close: %w", alloc.ErrClosed)
	}
	if s.graph != nil {
		if err := s.graph.Close(); err != nil {
			return fmt.Errorf("step: Close: %w", err)
		}
		s.graph = nil
	}
	s.closed = true
	return nil
}
