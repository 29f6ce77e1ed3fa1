package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// errStaleReplay is what the fresh-data check returns when a replay's output
// does not match an eager run on the same input: the graph used bytes frozen
// at capture time, or an output was not rewritten.
var errStaleReplay = errors.New("graph replay gave stale results")

// program is a small capturable pipeline run the way a careful probe runs a
// capturable operation: pinned input -> device -> transforms through a
// temporary allocated and freed inside it -> pinned output.
type program struct {
	a         *alloc.Allocator
	n         int64
	in, out   *alloc.HostBuffer
	dIn, dOut alloc.Buffer
	shift     int64 // a multiple of the alignment
	// fixedTmp, when set, replaces the temporary allocated inside the
	// pipeline: a graph with no memory nodes.
	fixedTmp alloc.Buffer
}

const (
	fillByte = 0xA5 // background of the output buffer
	tailByte = 0x3C // written over the last tailLen bytes
	tailLen  = 16
)

func newProgram(t *testing.T, a *alloc.Allocator, n int64) *program {
	t.Helper()
	p := &program{a: a, n: n, shift: a.Info().Alignment}
	require.Greater(t, n, p.shift+tailLen)
	p.in, p.out = mustHost(t, a, n), mustHost(t, a, n)
	p.dIn, p.dOut = mustAlloc(t, a, n), mustAlloc(t, a, n)
	return p
}

func (p *program) close(t *testing.T) {
	t.Helper()
	require.NoError(t, p.a.Synchronize())
	require.NoError(t, p.a.Free(p.dIn))
	require.NoError(t, p.a.Free(p.dOut))
	if p.fixedTmp.Size() != 0 {
		require.NoError(t, p.a.Free(p.fixedTmp))
	}
	require.NoError(t, p.in.Close())
	require.NoError(t, p.out.Close())
}

// enqueue queues the pipeline on the allocator's stream (or records it).
func (p *program) enqueue() error {
	a, n := p.a, p.n
	tmp, free := p.fixedTmp, func() error { return nil }
	if tmp.Size() == 0 {
		var err error
		if tmp, err = a.Alloc(n); err != nil {
			return err
		}
		free = func() error { return a.Free(tmp) }
	}
	return errors.Join(
		a.UploadHost(p.dIn, 0, p.in, 0, n),
		a.Memset(p.dOut, 0, fillByte, n),
		a.Copy(p.dOut, p.shift, p.dIn, 0, n-p.shift),
		a.Copy(tmp, 0, p.dOut, 0, n),
		a.Memset(tmp, n-tailLen, tailByte, tailLen),
		a.DownloadHost(p.out, 0, tmp, 0, n),
		free(),
	)
}

// model is what the pipeline computes, in plain Go.
func (p *program) model(in []byte) []byte {
	out := repeat(fillByte, int(p.n))
	copy(out[p.shift:], in[:p.n-p.shift])
	fill(out[p.n-tailLen:], tailByte)
	return out
}

// eager runs the pipeline without capture on the current input.
func (p *program) eager() ([]byte, error) {
	fill(p.out.Bytes(), 0)
	if err := p.enqueue(); err != nil {
		return nil, err
	}
	if err := p.a.Synchronize(); err != nil {
		return nil, err
	}
	return bytes.Clone(p.out.Bytes()), nil
}

// checkFreshReplays launches g replays times, each with a different input
// written into the pinned input and the pinned output reset before launch,
// and compares each result with an eager run on the same input. It returns
// an error wrapping errStaleReplay on the first mismatch.
func checkFreshReplays(p *program, g *alloc.Graph, replays int, seed uint64) error {
	var prev []byte
	for i := range replays {
		in := pattern(int(p.n), seed+uint64(i))
		if bytes.Equal(in, prev) {
			return fmt.Errorf("replay %d: test bug: input did not change", i)
		}
		prev = in
		copy(p.in.Bytes(), in)
		want, err := p.eager()
		if err != nil {
			return fmt.Errorf("replay %d: eager run: %w", i, err)
		}
		if err := diffBytes(want, p.model(in)); err != nil {
			return fmt.Errorf("replay %d: the eager run itself is wrong: %w", i, err)
		}
		fill(p.out.Bytes(), 0xEE) // reset outputs so a skipped write shows
		if err := g.Launch(); err != nil {
			return fmt.Errorf("replay %d: launch: %w", i, err)
		}
		if err := p.a.Synchronize(); err != nil {
			return fmt.Errorf("replay %d: synchronize: %w", i, err)
		}
		if err := diffBytes(p.out.Bytes(), want); err != nil {
			return fmt.Errorf("%w: replay %d differs from the eager run: %v", errStaleReplay, i, err)
		}
	}
	return nil
}

// captureProgram warms p up eagerly (as a probe does), then captures it.
func captureProgram(t *testing.T, p *program, mode alloc.CaptureMode) *alloc.Graph {
	t.Helper()
	copy(p.in.Bytes(), pattern(int(p.n), 999))
	_, err := p.eager()
	require.NoError(t, err, "warm-up")
	g, err := p.a.WithCapture(alloc.CaptureOptions{Mode: mode}, p.enqueue)
	require.NoError(t, err)
	require.False(t, g.Eager(), "the driver refused capture")
	return g
}

// replay: a graph replays with the data its inputs hold at launch, and
// the check that says so can fail.
func (s *suite) replay(t *testing.T) {
	runRules(t,
		rule{"fresh_data_50x", inEachMode(s.replaysReadFreshData)},
		rule{"stale_snapshot_detected", s.staleSnapshotDetected},
		rule{"graph_owned_temporary_unfreed", s.graphOwnedTemporarySurvivesReplays},
		rule{"graph_launch_in_capture_refused", forBoth("allocations", s.graphLaunchRefusedInEveryMode)},
		rule{"silent_invalidation_reported", s.silentInvalidationReported},
	)
}

func (s *suite) replaysReadFreshData(t *testing.T, mode alloc.CaptureMode) {
	e := s.env(t)
	p := newProgram(t, e.a, 8<<10)
	g := captureProgram(t, p, mode)
	assert.Equal(t, 1, g.CaptureAllocCount(), "the temporary is a graph allocation")
	require.NoError(t, checkFreshReplays(p, g, 50, 1000))
	require.NoError(t, g.Close())
	p.close(t)
}

// staleSnapshotDetected: a broken driver that freezes pinned inputs at
// capture time must fail the check: this proves the check can fail.
func (s *suite) staleSnapshotDetected(t *testing.T) {
	e := s.env(t)
	p := newProgram(t, e.a, 8<<10)
	require.NoError(t, e.spy.SnapshotCapturedUploads(64<<10))
	g := captureProgram(t, p, alloc.Global)
	err := checkFreshReplays(p, g, 50, 1000)
	require.ErrorIs(t, err, errStaleReplay)
	require.NoError(t, g.Close())
	p.close(t)
}

// graphOwnedTemporarySurvivesReplays: a graph allocation the graph does
// not free (auto-free on launch) survives every replay at the same
// address.
func (s *suite) graphOwnedTemporarySurvivesReplays(t *testing.T) {
	e := s.env(t)
	const n = 4096
	in, out := mustHost(t, e.a, n), mustHost(t, e.a, n)
	var tmp alloc.Buffer
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.ThreadLocal}, func() error {
		var err error
		if tmp, err = e.a.Alloc(n); err != nil {
			return err
		}
		return errors.Join(e.a.UploadHost(tmp, 0, in, 0, n), e.a.DownloadHost(out, 0, tmp, 0, n))
	})
	require.NoError(t, err)
	for i := range 10 {
		want := pattern(n, uint64(500+i))
		copy(in.Bytes(), want)
		fill(out.Bytes(), 0)
		launch(t, e.a, g)
		require.Equal(t, want, out.Bytes(), "replay %d", i)
	}
	require.NoError(t, g.Close())
	requireRefused(t, e.a.Free(tmp), alloc.StateNone, alloc.ErrInvalidBuffer)
	require.NoError(t, in.Close())
	require.NoError(t, out.Close())
}

// graphLaunchRefusedInEveryMode: cudaGraphLaunch into a capturing stream
// returns 900 and invalidates the capture in every mode, with or without
// memory nodes (cmd/cudatruth on CUDA 13.0): the allocator refuses first,
// the capture stays valid, and both graphs still replay.
func (s *suite) graphLaunchRefusedInEveryMode(t *testing.T, withAllocs bool) {
	e := s.env(t)
	p := newProgram(t, e.a, 4096)
	if !withAllocs {
		p.fixedTmp = mustAlloc(t, e.a, 4096)
	}
	inner := captureProgram(t, p, alloc.Global)
	require.Equal(t, withAllocs, inner.CaptureAllocCount() > 0)
	for _, mode := range driver.Modes() {
		require.NoError(t, e.a.BeginCapture(mode))
		launches := e.spy.Calls(alloctest.MethodGraphLaunch)
		requireRefused(t, inner.Launch(), alloc.StateActive, driver.ErrCaptureIllegalOp)
		assert.Equal(t, launches, e.spy.Calls(alloctest.MethodGraphLaunch), "refused before the driver")
		g, err := e.a.EndCapture()
		require.NoError(t, err, "the outer %s capture stays valid", mode)
		require.NoError(t, g.Close())
	}
	require.NoError(t, checkFreshReplays(p, inner, 5, 3000), "the inner graph still replays")
	require.NoError(t, inner.Close())
	p.close(t)
}

// silentInvalidationReported: a driver that invalidates the capture while
// reporting success for an operation is reported, not trusted.
func (s *suite) silentInvalidationReported(t *testing.T) {
	for _, m := range []alloctest.Method{alloctest.MethodMemsetAsync, alloctest.MethodCopyHtoDAsync, alloctest.MethodMallocAsync} {
		t.Run(m.String(), func(t *testing.T) {
			e := s.env(t)
			p := newProgram(t, e.a, 4096)
			base := usageOf(e.a)
			e.spy.InvalidateAfterNext(m)
			g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, p.enqueue)
			require.ErrorIs(t, err, alloc.ErrCaptureInvalidated)
			require.Nil(t, g)
			requireState(t, e.a, alloc.StateNone)
			assert.Equal(t, base, usageOf(e.a))
			p.close(t)
		})
	}
}
