package step_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/alloc/step"
	"github.com/capalloc/capalloc/cpu"
)

func newAlloc(t *testing.T) *alloc.Allocator {
	t.Helper()
	drv, err := cpu.New(cpu.Options{})
	require.NoError(t, err)
	a, err := alloc.New(drv, alloc.Options{Watchdog: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, a.Close())
		assert.NoError(t, drv.Close())
	})
	return a
}

func TestNewRefusesBadConfig(t *testing.T) {
	a := newAlloc(t)
	nop := func() error { return nil }
	for name, c := range map[string]struct {
		a   *alloc.Allocator
		cfg step.Config
	}{
		"nil allocator":  {nil, step.Config{Captured: nop}},
		"nil Captured":   {a, step.Config{}},
		"negative warm":  {a, step.Config{Captured: nop, WarmUp: -1}},
		"negative retry": {a, step.Config{Captured: nop, RetryAfter: -1}},
		"negative max":   {a, step.Config{Captured: nop, MaxCaptures: -1}},
	} {
		s, err := step.New(c.a, c.cfg)
		assert.ErrorIs(t, err, step.ErrInvalidConfig, name)
		assert.Nil(t, s, name)
	}
}

func TestRegistry(t *testing.T) {
	var r step.Registry // the zero value is ready
	assert.False(t, r.Contains("cudnn.find"))
	r.Add("cudnn.find", "", "upload.pageable")
	assert.True(t, r.Contains("cudnn.find"))
	assert.False(t, r.Contains(""), "empty names are ignored")
	assert.Equal(t, []string{"cudnn.find", "upload.pageable"}, r.Names())
	r.Remove("cudnn.find")
	assert.False(t, r.Contains("cudnn.find"))

	const name = "step_test.default_only"
	assert.False(t, step.IsNonCapturable(name))
	step.NonCapturable(name)
	t.Cleanup(func() { step.Default.Remove(name) })
	assert.True(t, step.IsNonCapturable(name))
	assert.True(t, step.Default.Contains(name))
}

func TestRegistryConcurrent(t *testing.T) {
	var r step.Registry
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				n := fmt.Sprintf("op%d.%d", i, j)
				r.Add(n)
				assert.True(t, r.Contains(n))
				_ = r.Names()
				if j%2 == 1 {
					r.Remove(n)
				}
			}
		}()
	}
	wg.Wait()
	assert.Len(t, r.Names(), 8*50)
}

func TestOpOnlyRefusesWhileCapturing(t *testing.T) {
	a := newAlloc(t)
	reg := &step.Registry{}
	reg.Add("cudnn.find")
	var during, outside []error
	var st *step.Step
	st, err := step.New(a, step.Config{Registry: reg, WarmUp: 1, Captured: func() error {
		err := st.Op("cudnn.find")
		if st.Capturing() {
			during = append(during, err, st.Op("gemm"))
		} else {
			outside = append(outside, err)
		}
		return err
	}})
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, st.Run())
	}
	require.Len(t, during, 2)
	assert.ErrorIs(t, during[0], step.ErrNonCapturable)
	assert.NoError(t, during[1], "an op not in the registry")
	assert.Equal(t, []error{nil, nil, nil}, outside, "warm-up and the eager runs")
	require.NoError(t, st.Close())
}

func TestIsCaptureError(t *testing.T) {
	for _, e := range []error{driver.ErrCaptureIllegalOp, alloc.ErrCaptureInvalidated, alloc.ErrCaptureIncompatibleAllocation,
		alloc.ErrSyncDuringCapture, driver.ErrCaptureUnavailable, step.ErrNonCapturable, step.ErrLazyWorkspace, step.ErrCapturePanic} {
		assert.True(t, step.IsCaptureError(fmt.Errorf("ctx: %w", e)), "%v", e)
	}
	assert.False(t, step.IsCaptureError(errors.New("plain")))
	assert.False(t, step.IsCaptureError(alloc.ErrOutOfMemory))
	assert.False(t, step.IsCaptureError(nil))
}

func TestModeString(t *testing.T) {
	assert.Equal(t, "none", step.ModeNone.String())
	assert.Equal(t, "warm-up", step.ModeWarmUp.String())
	assert.Equal(t, "captured", step.ModeCaptured.String())
	assert.Equal(t, "eager", step.ModeEager.String())
	assert.Equal(t, "unknown", step.Mode(99).String())
}

// A capture that outlives its Timeout leaves the allocator with an
// abandoned capture: the step records the reason and refuses to run the
// region eagerly into it, and reports that as its error.
func TestTimeoutDoesNotRunEagerIntoAbandonedCapture(t *testing.T) {
	a := newAlloc(t)
	release := make(chan struct{})
	calls := 0
	var mu sync.Mutex
	st, err := step.New(a, step.Config{Timeout: 50 * time.Millisecond, Captured: func() error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			<-release
		}
		return nil
	}})
	require.NoError(t, err)
	err = st.Run()
	require.ErrorIs(t, err, step.ErrCaptureFailed)
	require.ErrorIs(t, err, alloc.ErrCaptureTimeout)
	mu.Lock()
	assert.Equal(t, 1, calls, "not run eagerly into the abandoned capture")
	mu.Unlock()
	assert.Zero(t, st.Stats().EagerRuns)
	// The abandoned capture ends when its function returns; then the
	// step runs eagerly.
	require.ErrorIs(t, st.Run(), step.ErrCaptureFailed, "a step while the abandoned capture is open runs nothing")
	mu.Lock()
	assert.Equal(t, 1, calls, "not run eagerly into the abandoned capture")
	mu.Unlock()
	close(release)
	require.Eventually(t, func() bool {
		cs, err := a.CaptureStatus() // IsCapturing is false on an abandoned capture's error
		return err == nil && cs == alloc.StateNone
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, st.Run())
	assert.Equal(t, 1, st.Stats().EagerRuns)
	require.NoError(t, st.Close())
}
