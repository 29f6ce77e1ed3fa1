package conformance

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// failFastWait is how long a refused call may take. Generous: this checks
// that the call never reached the (held) driver, not speed.
const failFastWait = 2 * time.Second

// externalCall is an allocator call and the driver method it would make.
type externalCall struct {
	name   string
	method alloctest.Method
	do     func(e *env, b alloc.Buffer, h *alloc.HostBuffer) error
	// refusal is the sentinel the refused call wraps.
	refusal error
}

var externalCalls = []externalCall{
	{"alloc", alloctest.MethodMallocAsync, func(e *env, _ alloc.Buffer, _ *alloc.HostBuffer) error {
		return allocThenFree(e.a.Alloc, e.a, 123<<10) // a size the pool has not cached
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"alloc_sync", alloctest.MethodMalloc, func(e *env, _ alloc.Buffer, _ *alloc.HostBuffer) error {
		return allocThenFree(e.a.AllocSync, e.a, 1000)
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"host_alloc", alloctest.MethodHostAlloc, func(e *env, _ alloc.Buffer, _ *alloc.HostBuffer) error {
		return hostAllocThenClose(e.a, 1000)
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"upload_host", alloctest.MethodCopyHtoDAsync, func(e *env, b alloc.Buffer, h *alloc.HostBuffer) error {
		return e.a.UploadHost(b, 0, h, 0, 1000)
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"upload_pageable", alloctest.MethodCopyHtoD, func(e *env, b alloc.Buffer, _ *alloc.HostBuffer) error {
		return e.a.Upload(b, 0, make([]byte, 1000))
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"download_pageable", alloctest.MethodCopyDtoH, func(e *env, b alloc.Buffer, _ *alloc.HostBuffer) error {
		return e.a.Download(make([]byte, 1000), b, 0)
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"memset", alloctest.MethodMemsetAsync, func(e *env, b alloc.Buffer, _ *alloc.HostBuffer) error {
		return e.a.Memset(b, 0, 1, 1000)
	}, alloc.ErrCaptureIncompatibleAllocation},
	{"synchronize", alloctest.MethodStreamSynchronize, func(e *env, _ alloc.Buffer, _ *alloc.HostBuffer) error {
		return e.a.Synchronize()
	}, alloc.ErrSyncDuringCapture},
	{"query", alloctest.MethodStreamQuery, func(e *env, _ alloc.Buffer, _ *alloc.HostBuffer) error {
		_, err := e.a.Query()
		return err
	}, alloc.ErrSyncDuringCapture},
}

// external: with a capture started behind the allocator's back, every call
// that could hang fails fast with a typed error and never reaches the
// driver. The driver method it would call is held by the spy, so a call
// that got through would hang instead of returning.
func (s *suite) external(t *testing.T) {
	for _, c := range externalCalls {
		t.Run(c.name+"_fails_fast", func(t *testing.T) {
			e := s.env(t)
			b := mustAlloc(t, e.a, 1000)
			h := mustHost(t, e.a, 1000)
			require.NoError(t, e.spy.Inner().BeginCapture(e.a.Stream(), alloc.Global))
			release := e.spy.Block(c.method)
			defer release()
			before := e.spy.Snapshot()

			done := make(chan error, 1)
			go func() { done <- c.do(e, b, h) }()
			select {
			case err := <-done:
				requireRefused(t, err, alloc.StateExternal, c.refusal)
			case <-time.After(failFastWait):
				t.Fatalf("%s did not return within %v during an external capture: it reached the driver", c.name, failFastWait)
			}
			assertNoDriverCall(t, e.spy, before)
			release()

			hg, err := e.spy.Inner().EndCapture(e.a.Stream())
			require.NoError(t, err, "the refused call must not have invalidated the external capture")
			require.NoError(t, e.spy.Inner().GraphDestroy(hg))
			requireState(t, e.a, alloc.StateNone)
			require.NoError(t, c.do(e, b, h), "after the external capture ends the call works")
			require.NoError(t, e.a.Synchronize())
			require.NoError(t, e.a.Free(b))
			require.NoError(t, h.Close())
		})
	}
	t.Run("begin_refused", func(t *testing.T) {
		e := s.env(t)
		e.inExternalCapture(alloc.ThreadLocal, func() {
			requireRefused(t, e.a.BeginCapture(alloc.ThreadLocal), alloc.StateExternal, alloc.ErrAlreadyCapturing)
			_, err := e.a.EndCapture()
			requireRefused(t, err, alloc.StateExternal, alloc.ErrNotCapturing)
		})
	})
	t.Run("ended_behind_back_is_invalidated", func(t *testing.T) {
		// Our capture ended by someone else: the allocator must not keep
		// recording into nothing.
		e := s.env(t)
		b := mustAlloc(t, e.a, 1000)
		require.NoError(t, e.a.BeginCapture(alloc.Global))
		hg, err := e.spy.Inner().EndCapture(e.a.Stream())
		require.NoError(t, err)
		requireState(t, e.a, alloc.StateInvalidated)
		requireRefused(t, e.a.Memset(b, 0, 1, 1000), alloc.StateInvalidated, alloc.ErrCaptureInvalidated)
		_, err = e.a.EndCapture()
		require.Error(t, err)
		requireState(t, e.a, alloc.StateNone)
		require.NoError(t, e.spy.Inner().GraphDestroy(hg))
		require.NoError(t, e.a.Free(b))
	})
}
