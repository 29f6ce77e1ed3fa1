package step_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/step"
)

// records is a slog.Handler that keeps what it is given.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// warnings are the warnings logged, each as its attributes.
func (h *records) warnings() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.recs {
		if r.Level != slog.LevelWarn {
			continue
		}
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

func totalsOf(name string) step.Totals {
	for _, t := range step.ProcessTotals() {
		if t.Step == name {
			return t
		}
	}
	return step.Totals{}
}

// A step whose capture fails runs eagerly and says so: one warning per
// reason however many times it fails for it (a retry fails again), with
// the reason and what to do; the process totals count every fallback and
// eager run. The engine's setup is the one that ran eagerly unnoticed: a
// pageable upload in Pre (legal there) and a Synchronize in Captured.
func TestFallbackWarnsOncePerReasonAndCounts(t *testing.T) {
	a := newAlloc(t)
	buf, err := a.Alloc(4096)
	require.NoError(t, err)
	defer a.Free(buf)
	input := make([]byte, 4096)
	reg := &step.Registry{}
	useOp := false
	log := &records{}
	var st *step.Step
	st, err = step.New(a, step.Config{
		Name:   "fallback-warns",
		Logger: slog.New(log),
		Pre:    func() error { return a.Upload(buf, 0, input) },
		Captured: func() error {
			if useOp {
				if err := st.Op("cudnn.find"); err != nil {
					return err
				}
			}
			if err := a.Memset(buf, 0, 1, 4096); err != nil {
				return err
			}
			return a.Synchronize()
		},
		RetryAfter: 1,
		Registry:   reg,
	})
	require.NoError(t, err)
	defer st.Close()
	for range 5 { // fails, eager; eager; retry fails, eager; eager; retry fails
		require.NoError(t, st.Run(), "a fallback is no error of Run")
	}
	require.Equal(t, "sync-in-capture", st.Stats().Reason)
	warns := log.warnings()
	require.Len(t, warns, 1, "one warning for the reason, not one per failure: %v", warns)
	w := warns[0]
	require.Equal(t, "fallback-warns", w["step"])
	require.Equal(t, "sync-in-capture", w["reason"])
	require.Contains(t, w["what to do"], "move that to Pre or Post")
	require.Contains(t, w["err"], "synchroniz")
	require.Contains(t, w["msg"], "runs eagerly")

	reg.Add("cudnn.find")
	useOp = true
	for range 2 { // eager, then a retry that fails for another reason
		require.NoError(t, st.Run())
	}
	warns = log.warnings()
	require.Len(t, warns, 2, "a new reason is warned once more: %v", warns)
	require.Equal(t, "non-capturable-op", warns[1]["reason"])

	tot := totalsOf("fallback-warns")
	stats := st.Stats()
	require.EqualValues(t, stats.CapturesTried-1, tot.Fallbacks["sync-in-capture"])
	require.EqualValues(t, 1, tot.Fallbacks["non-capturable-op"])
	require.EqualValues(t, stats.EagerRuns, tot.EagerRuns)
}

// With FallbackIsError a failed capture is Run's error and the region is
// not run eagerly; the next Run tries again, until MaxCaptures.
func TestFallbackIsError(t *testing.T) {
	a := newAlloc(t)
	log := &records{}
	eager := 0
	capturing := false
	st, err := step.New(a, step.Config{
		Name:            "fallback-is-error",
		Logger:          slog.New(log),
		FallbackIsError: true,
		MaxCaptures:     2,
		Captured: func() error {
			if c, _ := a.IsCapturing(); !c {
				eager++
			}
			capturing = true
			return a.Synchronize()
		},
	})
	require.NoError(t, err)
	defer st.Close()
	for i := range 2 {
		err := st.Run()
		require.ErrorIs(t, err, step.ErrCaptureFailed, "attempt %d", i)
		require.ErrorIs(t, err, alloc.ErrSyncDuringCapture)
		require.Contains(t, err.Error(), "sync-in-capture")
	}
	require.True(t, capturing)
	require.Zero(t, eager, "the region was not run eagerly")
	require.Equal(t, 2, st.Stats().CapturesTried)
	err = st.Run()
	require.ErrorIs(t, err, step.ErrCaptureFailed)
	require.Contains(t, err.Error(), "no capture attempt left")
	require.Equal(t, 2, st.Stats().CapturesTried, "MaxCaptures bounds the attempts")
	require.Empty(t, log.warnings(), "the error is the caller's: nothing logged")
	require.EqualValues(t, 2, totalsOf("fallback-is-error").Fallbacks["sync-in-capture"])
}
