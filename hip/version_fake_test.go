package hip

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The fake built as Debian's 5.2.3: that version, no hipDeviceGraphMemTrim
// (its header does not declare it) and no hipLaunchHostFunc (its header
// declares it, the library does not export it).
func fake52(t *testing.T) string {
	t.Helper()
	return fake.Lib(t, "-DFAKE_HIP_RUNTIME_VERSION=50221153", "-DFAKE_NO_GRAPH_MEM_TRIM", "-DFAKE_NO_LAUNCH_HOST_FUNC")
}

// A runtime older than 5.6 is refused unless capture is given up, and the
// error names the version and why.
func TestFake52RefusedWithoutNoCapture(t *testing.T) {
	fake52(t)
	_, err := New(Options{})
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	for _, want := range []string{"HIP runtime 5.2.21153 is older than 5.6.0", "cannot capture pool allocations", "no_capture=true"} {
		require.Contains(t, err.Error(), want)
	}
}

// With no_capture it opens, and capture is refused with
// ErrCaptureUnavailable before any runtime call; WithCapture's eager
// fallback then runs the function without capture.
func TestFake52OpensWithNoCapture(t *testing.T) {
	path := fake52(t)
	log := gpurttest.OpenLog(t, path)
	d, err := New(Options{NoCapture: true})
	require.NoError(t, err)
	defer d.Close()
	require.Contains(t, d.Info().Name, "HIP runtime 5.2.21153")
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "lacks hipDeviceGraphMemTrim")
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "lacks hipLaunchHostFunc")
	s, err := d.CreateStream()
	require.NoError(t, err)
	log.Lines()
	err = d.BeginCapture(s, alloc.Global)
	require.ErrorIs(t, err, driver.ErrCaptureUnavailable)
	require.Contains(t, err.Error(), "no_capture")
	require.Empty(t, gpurttest.Find(log.Lines(), "hipStreamBeginCapture"))
	err = d.LaunchHostFunc(s, func() error { return nil })
	require.ErrorIs(t, err, driver.ErrDriver)
	require.Contains(t, err.Error(), "does not export hipLaunchHostFunc")

	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	ran := false
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global, EagerFallback: true}, func() error {
		ran = true
		b, err := a.Alloc(4096)
		if err != nil {
			return err
		}
		return a.Free(b)
	})
	require.NoError(t, err)
	require.True(t, ran)
	require.Contains(t, g.Warnings(), "driver cannot capture; graph runs its function eagerly")
	require.NoError(t, g.Close())
}

// Why the gate exists, shown on the fake: in a capture, 5.2 allocates from
// the pool at once, so the address is an ordinary allocation the caller
// still owns after the never-launched graph is destroyed (hipFreeAsync
// frees it); 5.6 records a graph allocation node, whose memory goes with
// the graph (hipFreeAsync of the address is refused, and the memory comes
// back with hipDeviceGraphMemTrim). The gate is bypassed here on purpose,
// through the driver's fields.
func TestFakeCapturedPoolAllocationBy52And56(t *testing.T) {
	for _, c := range []struct {
		name    string
		lib     func(*testing.T) string
		ownedBy string
	}{
		{"5.2.21153", fake52, "caller"},
		{"5.6.0", func(t *testing.T) string { t.Setenv("FAKE_HIP_VERSION", "50600000"); return fake.Lib(t) }, "graph"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.lib(t)
			d, err := New(Options{NoCapture: true})
			require.NoError(t, err)
			defer d.Close()
			d.opts.NoCapture = false // capture anyway, to see what the runtime does
			s, err := d.CreateStream()
			require.NoError(t, err)
			before := freeMemory(t, d)
			require.NoError(t, d.BeginCapture(s, alloc.Relaxed))
			p, err := d.MallocAsync(1<<20, s)
			require.NoError(t, err)
			g, err := d.EndCapture(s)
			require.NoError(t, err)
			require.NoError(t, d.GraphDestroy(g))
			require.Equal(t, uint64(1<<20), before-freeMemory(t, d))
			err = d.FreeAsync(p, s)
			if c.ownedBy == "caller" {
				require.NoError(t, err, "5.2: the capture allocated at once; the graph never owned it")
			} else {
				require.ErrorIs(t, err, alloc.ErrInvalidValue, "5.6: the address went with the graph")
				require.NoError(t, d.TrimGraphMemory())
			}
			require.NoError(t, d.StreamSynchronize(s))
			require.NoError(t, d.TrimPool()) // the pool keeps what is freed into it until trimmed
			require.Equal(t, before, freeMemory(t, d))
		})
	}
}

func freeMemory(t *testing.T, d *Driver) uint64 {
	t.Helper()
	var free, total uint64
	require.NoError(t, d.rt.Check("memory info", "hipMemGetInfo",
		gpurt.Call(d.rt.MemGetInfo.Addr, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))))
	return free
}

// The loader skips a 5.2 library for a later 5.6 one when capture is
// wanted, naming why, and takes the 5.2 one with no_capture.
func TestLoaderSkipsOldRuntimeUnlessNoCapture(t *testing.T) {
	old := fake52(t)
	t.Setenv("FAKE_HIP_VERSION", "50600000")
	cur := fake.Lib(t)
	rt, err := loader.First([]string{old, cur}, func(rt *runtimeAPI) error { return checkCaptureVersion(rt, false) })
	require.NoError(t, err)
	require.Equal(t, cur, rt.Path)
	rt, err = loader.First([]string{old, cur}, func(rt *runtimeAPI) error { return checkCaptureVersion(rt, true) })
	require.NoError(t, err)
	require.Equal(t, old, rt.Path)
	_, err = loader.First([]string{old}, func(rt *runtimeAPI) error { return checkCaptureVersion(rt, false) })
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), old+": HIP runtime 5.2.21153 is older than 5.6.0")
}

func TestVersionString(t *testing.T) {
	require.Equal(t, "5.2.21153", versionString(50221153))
	require.Equal(t, "5.6.0", versionString(minCaptureVersion))
	require.Equal(t, "6.1.40091", versionString(60140091))
	require.NoError(t, checkCaptureVersion(runtimeOf(50600000), false))
	require.Error(t, checkCaptureVersion(runtimeOf(50599999), false))
	require.True(t, errors.Is(checkCaptureVersion(runtimeOf(50500000), false), driver.ErrBackendUnavailable))
}

// runtimeOf is a runtime that reports version v.
func runtimeOf(v int) *runtimeAPI {
	rt := &runtimeAPI{}
	rt.Version = v
	return rt
}
