package conformance

import (
	"errors"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// hostFuncRow is LaunchHostFunc's row of the truth table: a stream-ordered
// operation like a copy. With no capture it runs by the next synchronize;
// in this allocator's capture it is a node that runs at launch, not
// before; in a foreign or invalidated capture it is refused with no driver
// call and never runs. A backend without host functions refuses it with
// errors.ErrUnsupported, before any driver call but the status query.
var hostFuncRow = ttOp{
	name: "launch_host_func",
	act: func(c *cell) {
		mark := c.host.Bytes()[:8]
		fill(mark, 0)
		err := c.a.LaunchHostFunc(func() error { fill(mark, 0x5A); return nil })
		launches := launchesHostFuncs(c.e.drv)
		switch {
		case !launches && (c.state == alloc.StateNone || c.state == alloc.StateActive):
			require.ErrorIs(c.t, err, errors.ErrUnsupported)
			// The Spy always offers LaunchHostFunc and refuses it itself
			// when the driver it wraps has none: nothing else is called.
			d := c.spy.Snapshot().Sub(c.before)
			require.Zero(c.t, d.Total(alloctest.MethodStreamCaptureStatus, alloctest.MethodLaunchHostFunc), "driver calls: %s", d)
		case c.state == alloc.StateNone:
			require.NoError(c.t, err)
			require.NoError(c.t, c.a.Synchronize())
			require.Equal(c.t, repeat(0x5A, 8), mark, "the host function ran by the synchronize")
		case c.state == alloc.StateActive:
			require.NoError(c.t, err)
			assertCalls(c.t, c.spy, c.before, alloctest.MethodLaunchHostFunc, 1)
			require.Equal(c.t, repeat(0, 8), mark, "a captured host function does not run at capture")
		default:
			c.refused(err, false)
		}
	},
	verify: func(c *cell, g *alloc.Graph) {
		mark := c.host.Bytes()[:8]
		launches := launchesHostFuncs(c.e.drv)
		switch {
		case c.state == alloc.StateActive && launches:
			require.Equal(c.t, repeat(0, 8), mark, "a captured host function does not run before launch")
			launch(c.t, c.a, g)
			require.Equal(c.t, repeat(0x5A, 8), mark, "the launch ran the host function")
		case c.state == alloc.StateExternal || c.state == alloc.StateInvalidated:
			require.NoError(c.t, c.a.Synchronize())
			require.Equal(c.t, repeat(0, 8), mark, "a refused host function never runs")
		}
	},
}
