package symheap_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/symheap"
)

// On a backend without IPC handles (cpu; the Spy in front of it forwards
// the IPC methods, so symheap looks through it) a device heap is refused
// at once, with no driver call but the capture status query and no
// exchange round; during a capture the capture is refused first. Bad
// arguments are typed errors.
func TestOpenDeviceRefusals(t *testing.T) {
	var spy *alloctest.Spy
	_, a := groupAndAllocator(t, 1, func(d driver.Driver) driver.Driver { spy = alloctest.NewSpy(d); return spy })
	require.False(t, symheap.DeviceRuns(spy), "the Spy forwards IPC, cpu has none")
	require.False(t, symheap.DeviceRuns(a.Driver()))

	x := symheap.NewLocalExchange(2) // rank 1 never comes: a refusal must not wait for it
	before := spy.Snapshot()
	start := time.Now()
	_, err := symheap.OpenDevice(0, a, x, 1<<16, symheap.DeviceOptions{Timeout: 5 * time.Second})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	require.Less(t, time.Since(start), 2*time.Second, "no exchange round")
	require.Zero(t, spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus, alloctest.MethodName), "no driver call but the status query")

	require.NoError(t, a.BeginCapture(alloc.Global))
	before = spy.Snapshot()
	_, err = symheap.OpenDevice(0, a, x, 1<<16, symheap.DeviceOptions{})
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.Zero(t, spy.Snapshot().Sub(before).Total(alloctest.MethodStreamCaptureStatus), "no driver call but the status query")
	st, err := a.CaptureStatus()
	require.NoError(t, err)
	require.Equal(t, alloc.StateActive, st, "the refusal leaves the capture valid")
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())

	for _, c := range []struct {
		err  error
		open func() error
	}{
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(2, a, x, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(-1, a, x, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(0, nil, x, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error { _, err := symheap.OpenDevice(0, a, nil, 1, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidSize, func() error { _, err := symheap.OpenDevice(0, a, x, 0, symheap.DeviceOptions{}); return err }},
		{alloc.ErrInvalidValue, func() error {
			_, err := symheap.OpenDevice(0, a, x, 1, symheap.DeviceOptions{Timeout: -time.Second})
			return err
		}},
	} {
		require.ErrorIs(t, c.open(), c.err)
	}
}
