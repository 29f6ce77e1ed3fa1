package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// hostFunc: Allocator.LaunchHostFunc puts the engine's own host work in
// stream order, and a capture records it so every replay runs it. A backend
// that cannot (a plugin: a Go function cannot cross into its process) must
// say so with errors.ErrUnsupported, never drop the function.
func (s *suite) hostFunc(t *testing.T) {
	runRules(t,
		rule{"stream_order", s.withHostFuncs(hostFuncsRunInStreamOrder)},
		rule{"captured_runs_at_every_replay", s.withHostFuncs(capturedHostFuncRunsAtEveryReplay)},
		rule{"error_fails_the_stream", s.withHostFuncs(hostFuncErrorFailsTheStream)},
		rule{"refused_in_external_capture", s.withHostFuncs(hostFuncRefusedInExternalCapture)},
		rule{"ordered_with_copies", s.withHostFuncs(hostFuncOrderedWithCopies)},
		rule{"nil_function", s.nilHostFuncIsInvalid},
	)
}

// withHostFuncs makes a check that runs check on a fresh env whose
// backend launches host functions; on one that cannot, it checks the
// refusal instead (env.launchesHostFuncs).
func (s *suite) withHostFuncs(check func(t *testing.T, e *env)) func(t *testing.T) {
	return func(t *testing.T) {
		e := s.env(t)
		if e.launchesHostFuncs(t) {
			check(t, e)
		}
	}
}

// hostFuncsRunInStreamOrder: host functions run in the order launched,
// all of them by the next Synchronize.
func hostFuncsRunInStreamOrder(t *testing.T, e *env) {
	var order []int
	for i := range 3 {
		require.NoError(t, e.a.LaunchHostFunc(func() error { order = append(order, i); return nil }))
	}
	require.NoError(t, e.a.Synchronize())
	require.Equal(t, []int{0, 1, 2}, order, "host functions run in stream order, all done by Synchronize")
}

// capturedHostFuncRunsAtEveryReplay: a captured host function does not run
// at capture; every launch runs it, reading its input at run time.
func capturedHostFuncRunsAtEveryReplay(t *testing.T, e *env) {
	var runs, input, seen atomic.Int64
	g, err := e.a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		return e.a.LaunchHostFunc(func() error {
			runs.Add(1)
			seen.Store(input.Load()) // reads its input at run time, not at capture
			return nil
		})
	})
	require.NoError(t, err)
	require.Zero(t, runs.Load(), "a captured host function does not run at capture")
	for i := int64(1); i <= 3; i++ {
		input.Store(10 * i)
		launch(t, e.a, g)
		require.Equal(t, i, runs.Load())
		require.Equal(t, 10*i, seen.Load(), "replay %d ran with stale input", i)
	}
	require.NoError(t, g.Close())
}

// hostFuncErrorFailsTheStream: a host function's error is the next
// Synchronize's, once.
func hostFuncErrorFailsTheStream(t *testing.T, e *env) {
	require.NoError(t, e.a.LaunchHostFunc(func() error { return errBoom }))
	require.ErrorIs(t, e.a.Synchronize(), errBoom, "the next synchronize reports the host function's failure")
	require.NoError(t, e.a.Synchronize(), "reported once")
}

// hostFuncRefusedInExternalCapture: in a capture the allocator did not
// start, LaunchHostFunc is refused before the driver and the function
// never runs.
func hostFuncRefusedInExternalCapture(t *testing.T, e *env) {
	ran := false
	e.inExternalCapture(alloc.Global, func() {
		before := e.spy.Snapshot()
		err := e.a.LaunchHostFunc(func() error { ran = true; return nil })
		requireRefused(t, err, alloc.StateExternal, alloc.ErrCaptureIncompatibleAllocation)
		assertCalls(t, e.spy, before, alloctest.MethodLaunchHostFunc, 0)
	})
	require.NoError(t, e.a.Synchronize())
	assert.False(t, ran)
}

// nilHostFuncIsInvalid: a nil function is ErrInvalidValue, on every
// backend.
func (s *suite) nilHostFuncIsInvalid(t *testing.T) {
	e := s.env(t)
	require.ErrorIs(t, e.a.LaunchHostFunc(nil), alloc.ErrInvalidValue)
}

// launchesHostFuncs reports whether e's backend runs host functions; one
// that cannot must refuse LaunchHostFunc with errors.ErrUnsupported and
// stay usable, which it checks.
func (e *env) launchesHostFuncs(t *testing.T) bool {
	t.Helper()
	if launchesHostFuncs(e.drv) {
		return true
	}
	err := e.a.LaunchHostFunc(func() error { return nil })
	require.ErrorIs(t, err, errors.ErrUnsupported, "a backend without host functions must say so")
	require.NoError(t, e.a.Synchronize())
	return false
}

// hostFuncOrderedWithCopies: a host function sees what the copies queued
// before it wrote into pinned memory, and the copies queued after it see
// what it wrote, eagerly and at every replay of a capture, with inputs
// changed between replays. This is what lets an engine's host work (and
// the cpu backend's collectives) sit between device operations.
func hostFuncOrderedWithCopies(t *testing.T, e *env) {
	const n = 4096
	a := e.a
	buf := mustAlloc(t, a, n)
	defer func() { require.NoError(t, a.Free(buf)) }()
	hbs := make([]*alloc.HostBuffer, 3) // in, mid (host function's input), out
	for i := range hbs {
		h, err := a.HostAlloc(n)
		require.NoError(t, err)
		defer func() { require.NoError(t, h.Close()) }()
		hbs[i] = h
	}
	in, mid, out := hbs[0], hbs[1], hbs[2]
	var hostErr error
	step := func() error {
		if err := a.UploadHost(buf, 0, in, 0, n); err != nil {
			return err
		}
		if err := a.DownloadHost(mid, 0, buf, 0, n); err != nil {
			return err
		}
		if err := a.LaunchHostFunc(func() error {
			// mid holds in's bytes by now; write their complement back.
			if !bytes.Equal(mid.Bytes(), in.Bytes()) {
				hostErr = fmt.Errorf("the host function ran before the copies queued ahead of it")
				return hostErr
			}
			for i, v := range mid.Bytes() {
				mid.Bytes()[i] = ^v
			}
			return nil
		}); err != nil {
			return err
		}
		if err := a.UploadHost(buf, 0, mid, 0, n); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, buf, 0, n)
	}
	check := func(round int) {
		t.Helper()
		require.NoError(t, hostErr, "round %d", round)
		for i, v := range out.Bytes() {
			require.Equal(t, ^in.Bytes()[i], v, "round %d, byte %d: the copy after the host function did not see what it wrote", round, i)
		}
	}
	fill := func(round int) {
		for i := range in.Bytes() {
			in.Bytes()[i] = byte(i*7 + round*31)
		}
		clear(out.Bytes())
	}
	fill(0)
	require.NoError(t, step())
	require.NoError(t, a.Synchronize())
	check(0)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, step)
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close()) }()
	for k := 1; k <= 3; k++ {
		fill(k)
		launch(t, a, g)
		check(k)
	}
}
