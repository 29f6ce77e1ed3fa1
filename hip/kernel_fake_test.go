package hip

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
	"github.com/capalloc/capalloc/internal/kernels"
)

// What both drivers do with modules and launches is tested once, for
// both, in internal/gpurt (kernel_fake_test.go there); here, what only
// HIP does: the architecture the source is compiled for, the timer's
// rate, and the compiler.

// fakeRTC compiles with the hiprtc of the fake libamdhip64 at lib, as the
// driver's default compiler does (hiprtcFor), for arch given here.
func fakeRTC(lib string) Compiler {
	return func(src, name, arch string) ([]byte, error) {
		r, err := hiprtcFor(lib)
		if err != nil {
			return nil, err
		}
		return r.CompileHIP(src, name, arch)
	}
}

// recording compiles with the fake's hiprtc and records the architecture
// it was asked for.
func recording(lib string, arch *string) Compiler {
	compile := fakeRTC(lib)
	return func(src, name, a string) ([]byte, error) {
		*arch = a
		return compile(src, name, a)
	}
}

// The source is compiled for the device's gcnArchName, read from ROCm 6's
// properties layout when the library has it and from ROCm 5's otherwise.
func TestFakeCompilesForTheDeviceArch(t *testing.T) {
	for _, c := range []struct {
		name, flag, props string
	}{
		{"R0600", "", "hipGetDevicePropertiesR0600 device=0"},
		{"R0000", "-DFAKE_NO_PROPS_R0600", "hipGetDeviceProperties device=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var flags []string
			if c.flag != "" {
				flags = append(flags, c.flag)
			}
			lib := fake.Lib(t, flags...)
			log := gpurttest.OpenLog(t, lib)
			t.Setenv("FAKE_HIP_ARCH", "gfx1030")
			var arch string
			d, err := New(Options{Compile: recording(lib, &arch)})
			require.NoError(t, err)
			defer d.Close()
			m, err := d.LoadModule(kernels.Image())
			require.NoError(t, err)
			require.Equal(t, "gfx1030", arch)
			require.Len(t, m.Kernels, len(kernels.Names))
			lines := log.Lines()
			require.Len(t, gpurttest.Find(lines, c.props), 1, "%v", lines)
			require.Len(t, gpurttest.Find(lines, "hiprtcCompileProgram option --offload-arch=gfx1030"), 1)
		})
	}
}

// The timer's rate is hipDeviceAttributeWallClockRate (kHz); a runtime
// that refuses the attribute cannot time the kernels' waits, and the load
// says so.
func TestFakeWallClockRate(t *testing.T) {
	fake.Lib(t)
	t.Setenv("FAKE_HIP_WALL_CLOCK_KHZ", "100000")
	d, err := New(Options{}) // the default compiler: the runtime's hiprtc
	require.NoError(t, err)
	defer d.Close()
	m, err := d.LoadModule(kernels.Image())
	require.NoError(t, err)
	require.Equal(t, uint64(100_000_000), m.TimerHz)

	fake.Lib(t)
	t.Setenv("FAKE_HIP_WALL_CLOCK_KHZ", "0")
	d2, err := New(Options{})
	require.NoError(t, err)
	defer d2.Close()
	_, err = d2.LoadModule(kernels.Image())
	require.ErrorIs(t, err, driver.ErrBackendUnavailable)
	require.Contains(t, err.Error(), "hipDeviceAttributeWallClockRate")
	require.Contains(t, err.Error(), "the kernels' timeouts cannot be set")
}

// Without Options.Compile the driver compiles with the hiprtc of the
// runtime it loaded (ROCm 5's libamdhip64 exports it; so does the fake);
// a compiler's error is the load's, wrapped; a code object for another
// processor is the runtime's 209.
func TestFakeCompileFailures(t *testing.T) {
	lib := fake.Lib(t)
	log := gpurttest.OpenLog(t, lib)
	d, err := New(Options{})
	require.NoError(t, err)
	defer d.Close()
	_, err = d.LoadModule(kernels.Image())
	require.NoError(t, err)
	require.Len(t, gpurttest.Find(log.Lines(), "hiprtcCompileProgram option --offload-arch=gfx90a:sramecc+:xnack-"), 1, "the runtime's own hiprtc compiled it")

	boom := errors.New("boom")
	d2, err := New(Options{Compile: func(string, string, string) ([]byte, error) { return nil, boom }})
	require.NoError(t, err)
	defer d2.Close()
	_, err = d2.LoadModule(kernels.Image())
	require.ErrorIs(t, err, boom)
	require.Contains(t, err.Error(), "load module capalloc collectives: compile for gfx90a:sramecc+:xnack-")

	other := fakeRTC(lib)
	d3, err := New(Options{Compile: func(src, name, _ string) ([]byte, error) { return other(src, name, "gfx908") }})
	require.NoError(t, err)
	defer d3.Close()
	_, err = d3.LoadModule(kernels.Image())
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, 209, e.Code, "%v", err)
	require.Contains(t, err.Error(), "hipErrorNoBinaryForGpu")
}
