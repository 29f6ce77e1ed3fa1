// Package conformance is the suite every capalloc backend must pass: the
// capture contract of docs/design.md cell by cell, replay with fresh data,
// aliasing, failure cleanup, the watchdog, concurrency and bad input, all
// through alloc.Allocator over the backend's driver.Driver.
//
// A backend's test calls Run with a Factory; `go test ./conformance
// -backend=NAME` runs it for a registered backend.
package conformance

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/syncbuf"
)

// Factory opens a fresh driver for one subtest; Run closes it with
// t.Cleanup. A Factory fails t itself when it cannot open the driver.
type Factory func(t testing.TB) driver.Driver

// testWatchdog bounds blocking calls in tests that do not test the
// watchdog: a hung backend fails the subtest instead of hanging go test.
const testWatchdog = 10 * time.Second

// Run runs the whole suite against the driver open makes. Subtest names are
// stable: Group/case[/mode/state/op].
func Run(t *testing.T, open Factory) { RunGroups(t, open, Groups()...) }

// Groups names the suite's groups, in the order Run runs them.
func Groups() []string {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.name
	}
	return names
}

// RunGroups runs the named groups of the suite (Groups), in Run's order,
// for a caller that runs the rest elsewhere. An unknown name fails t.
func RunGroups(t *testing.T, open Factory, names ...string) {
	for _, n := range names {
		if !slices.ContainsFunc(groups, func(g group) bool { return g.name == n }) {
			t.Fatalf("conformance: no group %q (groups: %v)", n, Groups())
		}
	}
	s := &suite{open: closing(open)}
	for _, g := range groups {
		if slices.Contains(names, g.name) {
			t.Run(g.name, func(t *testing.T) { g.run(s, t) })
		}
	}
}

// group is one top-level group of the suite.
type group struct {
	name string
	run  func(s *suite, t *testing.T)
}

var groups = []group{
	{"Info", (*suite).info},
	{"Eager", (*suite).eager},
	{"TruthTable", (*suite).truthTable},
	{"CrossAllocator", (*suite).crossAllocator},
	{"Replay", (*suite).replay},
	{"Aliasing", (*suite).aliasing},
	{"FailedCapture", (*suite).failedCapture},
	{"WithCapture", (*suite).withCapture},
	{"StepExecutor", (*suite).stepExecutor},
	{"External", (*suite).external},
	{"Workspace", (*suite).workspace},
	{"GraphPool", (*suite).graphPool},
	{"Pressure", (*suite).pressure},
	{"Watchdog", (*suite).watchdog},
	{"Concurrency", (*suite).concurrency},
	{"InFlight", (*suite).inFlight},
	{"HostFunc", (*suite).hostFunc},
	{"HostMemory", (*suite).hostMemory},
	{"Enqueue", (*suite).enqueue},
	{"Collectives", (*suite).collectivesGroup},
	{"BadInput", (*suite).badInput},
	{"Close", (*suite).close},
	{"Leaks", (*suite).leaks},
	{"Migration", (*suite).migration},
	{"Probe", func(s *suite, t *testing.T) { probeSuite(t, s.open) }},
}

// closing wraps open so that every driver it opens is closed by the
// cleanup of the test that opened it.
func closing(open Factory) Factory {
	return func(t testing.TB) driver.Driver {
		t.Helper()
		d := open(t)
		require.NotNil(t, d, "factory returned a nil driver")
		t.Cleanup(func() { assert.NoError(t, d.Close(), "closing the driver") })
		return d
	}
}

type suite struct {
	open       Factory
	expandable bool // every allocator grows expandable segments (RunExpandable)
}

// env is one subtest's world: a fresh driver behind a Spy and an allocator
// on it. Its cleanup closes the allocator and fails the test if that
// reports a leak, so every subtest also proves it released what it took.
type env struct {
	t   *testing.T
	s   *suite
	drv driver.Driver // the backend's driver, unwrapped
	spy *alloctest.Spy
	a   *alloc.Allocator

	closed map[*alloc.Allocator]bool // closed by the test itself
	// logs collects what the allocators logged, so tests can check their
	// warnings and a passing run stays quiet. Abandoned calls write to it
	// too, after the test may be over (t.Log would panic).
	logs *syncbuf.Buffer
}

// openDriver opens a driver that t's cleanup closes.
func (s *suite) openDriver(t *testing.T) driver.Driver {
	t.Helper()
	return s.open(t)
}

// newEnv opens a driver and makes an allocator with opts on it; a zero
// Watchdog becomes testWatchdog.
func (s *suite) newEnv(t *testing.T, opts alloc.Options) *env {
	t.Helper()
	d := s.openDriver(t)
	e := &env{t: t, s: s, drv: d, spy: alloctest.NewSpy(d), logs: &syncbuf.Buffer{}}
	t.Cleanup(func() {
		e.spy.ReleaseAll() // a held call must not hang the cleanup
		assert.NoError(t, e.spy.StopSnapshot(), "freeing the spy's staging memory")
	})
	e.a = e.newAllocator(opts)
	return e
}

// env is newEnv with default options.
func (s *suite) env(t *testing.T) *env { return s.newEnv(t, alloc.Options{}) }

// newAllocator makes another allocator on the same (spied) driver; the
// test's cleanup closes it and asserts it leaked nothing.
func (e *env) newAllocator(opts alloc.Options) *alloc.Allocator {
	e.t.Helper()
	if opts.Watchdog == 0 {
		opts.Watchdog = testWatchdog
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(e.logs, nil))
	}
	opts.ExpandableSegments = opts.ExpandableSegments || e.s.expandable
	a, err := alloc.New(e.spy, opts)
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		e.spy.ReleaseAll() // a call held by a failed test must not block Close
		if !e.closed[a] {
			assert.NoError(e.t, a.Close(), "allocator Close at the end of the test (a leak or an open capture)")
		}
	})
	return a
}

// close closes a during the test (tests about Close itself); the cleanup
// then leaves it alone.
func (e *env) close(a *alloc.Allocator) error {
	if e.closed == nil {
		e.closed = map[*alloc.Allocator]bool{}
	}
	e.closed[a] = true
	return a.Close()
}

// usage is the part of Stats that must return to a baseline.
type usage struct {
	InUse, Reserved int64
	Live, Graphs    int
	HostBuffers     int
}

func usageOf(a *alloc.Allocator) usage {
	s := a.Stats()
	return usage{InUse: s.BytesInUse, Reserved: s.BytesReserved, Live: s.LiveBuffers, Graphs: s.LiveGraphs, HostBuffers: s.HostBuffers}
}

// driverUsage is the driver's own count of the memory it handed out, for
// backends that report it (driver.UsageReporter); ok is false otherwise.
func driverUsage(d driver.Driver) (u driver.Usage, ok bool) {
	r, ok := d.(driver.UsageReporter)
	if !ok {
		return driver.Usage{}, false
	}
	u, err := r.Usage()
	return u, err == nil
}

// launchesHostFuncs reports whether d runs host functions in stream order
// (driver.HostFuncLauncher); a backend without them refuses
// LaunchHostFunc with errors.ErrUnsupported.
func launchesHostFuncs(d driver.Driver) bool {
	_, ok := d.(driver.HostFuncLauncher)
	return ok
}

// liveBytes is driverUsage's device bytes.
func liveBytes(d driver.Driver) (n int64, ok bool) {
	u, ok := driverUsage(d)
	return u.Device, ok
}
