package alloc_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// strictPair is two allocators on one emulated GB10 (strict capture
// safety), each behind a recording driver.
func strictPair(t *testing.T, opts cpu.Options) (d *cpu.Driver, a, b *alloc.Allocator, sa, sb *alloctest.Spy) {
	t.Helper()
	return strictPairWith(t, opts, alloc.Options{})
}

// strictPairWith is strictPair with both allocators opened with aopts.
func strictPairWith(t *testing.T, opts cpu.Options, aopts alloc.Options) (d *cpu.Driver, a, b *alloc.Allocator, sa, sb *alloctest.Spy) {
	t.Helper()
	d, err := cpu.New(opts)
	require.NoError(t, err)
	sa, sb = alloctest.NewSpy(d), alloctest.NewSpy(d)
	a, err = alloc.New(sa, aopts)
	require.NoError(t, err)
	b, err = alloc.New(sb, aopts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = a.Close()
		_ = b.Close()
		_ = d.Close()
	})
	return d, a, b, sa, sb
}

// requireStrict checks err is a strict-safety refusal: the capture
// sentinels, and the device's profile named.
func requireStrict(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp, what)
	require.ErrorIs(t, err, alloc.ErrCaptureIncompatibleAllocation, what)
	require.Contains(t, err.Error(), "strict (gb10, sm 12.1, integrated, pageable memory access via host page tables)", what)
}

// Under strict safety, while any capture is active (own Relaxed one,
// another allocator's in any mode), every synchronous allocation or free
// and every pinned host allocation or free is refused before the driver;
// allocation into the capture stays allowed.
func TestStrictSafetyRefusesBeforeTheDriver(t *testing.T) {
	for _, mode := range []alloc.CaptureMode{alloc.Global, alloc.ThreadLocal, alloc.Relaxed} {
		t.Run(mode.String(), func(t *testing.T) {
			_, a, b, sa, sb := strictPair(t, cpu.Options{Profile: cpu.ProfileGB10})
			require.Equal(t, driver.SafetyStrict, a.Info().CaptureSafety)
			// Made before the capture: buffers to free during it.
			syncA, err := a.AllocSync(1 << 20)
			require.NoError(t, err)
			syncB, err := b.AllocSync(1 << 20)
			require.NoError(t, err)
			hostB, err := b.HostAlloc(4096)
			require.NoError(t, err)

			require.NoError(t, a.BeginCapture(mode))
			beforeA, beforeB := sa.Snapshot(), sb.Snapshot()

			// Where the documented rules refuse a call already (this
			// allocator's own Global or ThreadLocal capture, another's
			// Global one) that refusal stands; strict refuses the rest.
			refused := func(err error, what string, documentedRefuses bool) {
				t.Helper()
				if documentedRefuses {
					require.ErrorIs(t, err, alloc.ErrCaptureIncompatibleAllocation, what)
					return
				}
				requireStrict(t, err, what)
			}
			ownDoc, otherDoc := mode != alloc.Relaxed, mode == alloc.Global
			_, err = a.AllocSync(1 << 20)
			refused(err, "own AllocSync", ownDoc)
			_, err = b.AllocSync(1 << 20)
			refused(err, "other AllocSync", otherDoc)
			refused(b.Free(syncB), "other sync Free", otherDoc)
			// Sizes of classes the host cache holds nothing of: pinnings.
			_, err = b.HostAlloc(1 << 20)
			refused(err, "other HostAlloc", otherDoc)
			_, err = a.HostAlloc(1 << 20)
			refused(err, "own HostAlloc", ownDoc)
			// A cached buffer's Close is no driver call (hostcache_test.go).
			require.NoError(t, hostB.Close(), "other HostBuffer.Close into the cache")
			require.ErrorIs(t, b.Trim(), driver.ErrCaptureIllegalOp, "other Trim frees cached segments")
			dA, dB := sa.Snapshot().Sub(beforeA), sb.Snapshot().Sub(beforeB)
			for _, m := range []alloctest.Method{alloctest.MethodMalloc, alloctest.MethodFree, alloctest.MethodHostAlloc,
				alloctest.MethodHostFree, alloctest.MethodMallocAsync, alloctest.MethodFreeAsync} {
				require.Zero(t, dA[m], "own %s reached the driver", m)
				require.Zero(t, dB[m], "other %s reached the driver", m)
			}
			// Pool growth on the other allocator (its pool is empty): a
			// call the documented rules make in Relaxed interaction mode
			// only during a Global capture elsewhere, so strict refuses it
			// then, and lets ranks capture side by side otherwise.
			grown, err := b.Alloc(1 << 20)
			if mode == alloc.Global {
				requireStrict(t, err, "other pool growth during a Global capture")
				require.Zero(t, sb.Snapshot().Sub(beforeB)[alloctest.MethodMallocAsync], "other pool growth reached the driver")
			} else {
				require.NoError(t, err, "other pool growth during a %s capture", mode)
				require.NoError(t, b.Free(grown))
			}

			// Allocation into the capture is the stream-ordered path on
			// the capturing stream: allowed.
			in, err := a.Alloc(4096)
			require.NoError(t, err)
			require.NoError(t, a.Free(in))
			// Own sync Free during the capture is deferred, not refused.
			require.NoError(t, a.Free(syncA))

			g, err := a.EndCapture()
			require.NoError(t, err)
			// No capture any more: everything works again.
			require.NoError(t, b.Free(syncB))
			x, err := b.AllocSync(1 << 20)
			require.NoError(t, err)
			require.NoError(t, b.Free(x))
			require.NoError(t, g.Close())
		})
	}
}

// On the GB10 profile every refusal of an unsafe call during a capture
// matches both capture sentinels, whichever rule refused it (the
// documented rules' refusal during the allocator's own capture or another
// one's Global capture, or strict safety's): an engine matching
// driver.ErrCaptureIllegalOp sees each of them, as docs/capture-safety.md
// says. The host cache is off, so HostAlloc and HostBuffer.Close reach
// the driver (a cached one makes no driver call and is allowed:
// hostcache_test.go).
func TestUnsafeRefusalsMatchBothSentinels(t *testing.T) {
	for _, mode := range []alloc.CaptureMode{alloc.Global, alloc.ThreadLocal, alloc.Relaxed} {
		t.Run(mode.String(), func(t *testing.T) {
			_, a, b, _, _ := strictPairWith(t, cpu.Options{Profile: cpu.ProfileGB10}, alloc.Options{NoHostCache: true})
			syncB, err := b.AllocSync(1 << 20)
			require.NoError(t, err)
			hostA, err := a.HostAlloc(4096)
			require.NoError(t, err)
			hostB, err := b.HostAlloc(4096)
			require.NoError(t, err)
			for _, x := range []*alloc.Allocator{a, b} { // a cached segment each, for Trim to free
				buf, err := x.Alloc(1 << 20)
				require.NoError(t, err)
				require.NoError(t, x.Free(buf))
			}

			require.NoError(t, a.BeginCapture(mode))
			both := func(err error, what string) { // each call's verdict reported, not the first only
				t.Helper()
				assert.ErrorIs(t, err, driver.ErrCaptureIllegalOp, what)
				assert.ErrorIs(t, err, alloc.ErrCaptureIncompatibleAllocation, what)
				var ae *alloc.Error
				assert.ErrorAs(t, err, &ae, what)
			}
			_, err = a.AllocSync(1 << 20)
			both(err, "own AllocSync")
			_, err = b.AllocSync(1 << 20)
			both(err, "other AllocSync")
			both(b.Free(syncB), "other synchronous Free")
			_, err = a.HostAlloc(4096)
			both(err, "own HostAlloc")
			_, err = b.HostAlloc(4096)
			both(err, "other HostAlloc")
			both(hostA.Close(), "own HostBuffer.Close")
			both(hostB.Close(), "other HostBuffer.Close")
			both(a.Trim(), "own Trim")
			both(b.Trim(), "other Trim")

			g, err := a.EndCapture()
			require.NoError(t, err)
			require.NoError(t, g.Close())
			require.NoError(t, b.Free(syncB))
			require.NoError(t, hostA.Close())
			require.NoError(t, hostB.Close())
		})
	}
}

// The documented rules (capture_safety=documented) let a Relaxed
// capture's own AllocSync reach the driver, as before; strict refuses it.
// This is the example: a.BeginCapture(Relaxed); a.AllocSync.
func TestCaptureSafetyOverride(t *testing.T) {
	_, a, _, sa, _ := strictPair(t, cpu.Options{Profile: cpu.ProfileGB10, CaptureSafety: driver.SafetyDocumented})
	require.Equal(t, driver.SafetyDocumented, a.Info().CaptureSafety)
	require.NoError(t, a.BeginCapture(alloc.Relaxed))
	before := sa.Calls(alloctest.MethodMalloc)
	buf, err := a.AllocSync(1 << 20)
	// The emulated GB10 fails the call the real one hangs in: the
	// documented rules reach it.
	require.ErrorIs(t, err, driver.ErrCaptureIllegalOp)
	require.True(t, strings.Contains(err.Error(), "hangs a GB10 driver"), err.Error())
	require.Equal(t, before+1, sa.Calls(alloctest.MethodMalloc))
	_ = buf
	_, err = a.EndCapture()
	require.NoError(t, err)
}

// Another allocator's graph instantiation during a capture is refused
// (the capture it ended yields no graph), and a graph closed during a
// capture is destroyed only once the last capture ended.
func TestStrictSafetyInstantiateAndExecDestroy(t *testing.T) {
	_, a, b, _, sb := strictPair(t, cpu.Options{Profile: cpu.ProfileGB10})
	// b's graph, made before a's capture.
	require.NoError(t, b.BeginCapture(alloc.Global))
	g, err := b.EndCapture()
	require.NoError(t, err)

	// Another allocator's Relaxed or ThreadLocal capture: b captures and
	// instantiates beside it (ranks of one process capture side by side).
	for _, mode := range []alloc.CaptureMode{alloc.Relaxed, alloc.ThreadLocal} {
		require.NoError(t, a.BeginCapture(mode))
		require.NoError(t, b.BeginCapture(alloc.Relaxed))
		gb, err := b.EndCapture()
		require.NoError(t, err, "instantiate during another allocator's %s capture", mode)
		require.NoError(t, gb.Close())
		ga, err := a.EndCapture()
		require.NoError(t, err)
		require.NoError(t, ga.Close())
	}

	// Another allocator's Global capture: the documented rules would
	// instantiate and destroy in Relaxed interaction mode; strict refuses
	// the instantiation and defers the destroy.
	require.NoError(t, a.BeginCapture(alloc.Global))
	require.NoError(t, b.BeginCapture(alloc.Relaxed))
	before := sb.Snapshot()
	_, err = b.EndCapture()
	requireStrict(t, err, "instantiate during another allocator's Global capture")
	require.Zero(t, sb.Snapshot().Sub(before)[alloctest.MethodGraphInstantiate])

	require.NoError(t, g.Close())
	require.Zero(t, sb.Snapshot().Sub(before)[alloctest.MethodGraphExecDestroy], "exec destroyed during a Global capture")

	ga, err := a.EndCapture()
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sb.Snapshot().Sub(before)[alloctest.MethodGraphExecDestroy] == 1 },
		30*time.Second, time.Millisecond, "the deferred exec destroy runs once no capture is active")
	require.NoError(t, ga.Close())
}

// ClassifySafety: GB10 and unrecorded devices are strict, the recorded
// H100 documented.
func TestClassifySafety(t *testing.T) {
	for _, c := range []struct {
		info    driver.DeviceInfo
		want    driver.CaptureSafety
		profile string
	}{
		{driver.DeviceInfo{Name: "NVIDIA GB10", ComputeCapability: "12.1", Integrated: true}, driver.SafetyStrict, "gb10"},
		{driver.DeviceInfo{Name: "NVIDIA H100 80GB HBM3", ComputeCapability: "9.0"}, driver.SafetyDocumented, "recorded:h100-driver580-cuda13.0.json"},
		{driver.DeviceInfo{Name: "NVIDIA H100 80GB HBM3", ComputeCapability: "8.0"}, driver.SafetyStrict, "unrecorded"},
		{driver.DeviceInfo{Name: "NVIDIA A100", ComputeCapability: "8.0"}, driver.SafetyStrict, "unrecorded"},
		{driver.DeviceInfo{Name: "AMD APU", ComputeCapability: "9.0", Integrated: true}, driver.SafetyStrict, "integrated"},
	} {
		got, profile := driver.ClassifySafety(c.info)
		require.Equal(t, c.want, got, c.info.Name)
		require.Equal(t, c.profile, profile, c.info.Name)
	}
	for _, s := range []string{"strict", "documented"} {
		v, err := driver.ParseCaptureSafety(s)
		require.NoError(t, err)
		require.Equal(t, s, v.String())
	}
	_, err := driver.ParseCaptureSafety("lax")
	require.True(t, errors.Is(err, alloc.ErrInvalidValue))
}
