package alloc_test

import (
	"bytes"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// statusFailing is a cpu driver whose capture status read fails while fail
// is set, as a driver whose runtime reports an error would.
type statusFailing struct {
	driver.Driver
	fail atomic.Bool
}

var errStatus = errors.New("capture status unreadable")

func (d *statusFailing) StreamCaptureStatus(s driver.Stream) (driver.CaptureStatus, error) {
	if d.fail.Load() {
		return driver.CaptureNone, errStatus
	}
	return d.Driver.StreamCaptureStatus(s)
}

// IsCapturing reports the error it cannot read the status for, instead of
// a false that reads as "not capturing".
func TestIsCapturingReportsTheStatusError(t *testing.T) {
	inner := newCPU(t, 1<<20)
	d := &statusFailing{Driver: inner}
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)

	on, err := a.IsCapturing()
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, a.BeginCapture(alloc.Global))
	on, err = a.IsCapturing()
	require.NoError(t, err)
	require.True(t, on)
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())

	d.fail.Store(true)
	on, err = a.IsCapturing()
	require.ErrorIs(t, err, errStatus)
	require.False(t, on)
	d.fail.Store(false)

	require.NoError(t, a.Close())
	on, err = a.IsCapturing()
	require.ErrorIs(t, err, alloc.ErrClosed)
	require.False(t, on)
}

// panicsInCapture panics; its name is what the logged stack must show.
func panicsInCapture() error { panic("capture_test: boom") }

// A panic in WithCapture's function is re-raised in the caller with its
// value unchanged, and the stack of the function's own goroutine, where
// it panicked, is logged first: the re-raise happens on the caller's
// goroutine, whose stack does not show the function.
func TestWithCapturePanicKeepsValueAndLogsItsStack(t *testing.T) {
	d := newCPU(t, 1<<20)
	var logged bytes.Buffer
	a, err := alloc.New(d, alloc.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	require.NoError(t, err)

	require.PanicsWithValue(t, "capture_test: boom", func() {
		_, _ = a.WithCapture(alloc.CaptureOptions{}, panicsInCapture)
	})
	require.Contains(t, logged.String(), "level=ERROR")
	require.Contains(t, logged.String(), "capture_test: boom")
	require.Contains(t, logged.String(), "alloc_test.panicsInCapture", "the panicking function's frame is in the logged stack")
	on, err := a.IsCapturing()
	require.NoError(t, err)
	require.False(t, on, "the panic ended the capture")
	require.NoError(t, a.Close())
}
