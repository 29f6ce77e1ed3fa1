package gpurt_test

// The fake-runtime tests that are the same for both vendors, run once per
// vendor from one table: the fake libcudart (cuda/testdata/fakecudart.c)
// and the fake libamdhip64 (hip/testdata/fakehip.c), each on the shared
// core internal/fakegpu/core.c, are compiled with gcc and loaded through
// the vendor's library variable, so the purego marshalling of every bound
// call runs here without a GPU. What only one vendor has stays in its
// package's tests.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/backends/plugin"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/fakes"
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// TestMain lets this test binary serve as its own plugin process, so
// plugin:cuda and plugin:hip run the drivers in a child over the fakes.
func TestMain(m *testing.M) {
	plugin.ServeIfChild()
	os.Exit(m.Run())
}

// gpuDriver is what both vendor drivers offer (gpurt.Driver's methods).
type gpuDriver interface {
	driver.Driver
	driver.HostFuncLauncher
	driver.IPCMemory
	driver.StreamIdler
	driver.PoolTrimmer
	driver.GraphMemTrimmer
	driver.KernelLauncher
	driver.MemInfoer
	gpurt.Embedder
	WaitClosed(ctx context.Context) error
	Warnings() []string
	OnDevice(op string, fn func() error) error
	ExportPool() (int, error)
	ExportPointer(p driver.DevicePtr) ([]byte, error)
	ImportPool(fd int) (*gpurt.ImportedPool, error)
}

var (
	_ gpuDriver = (*cuda.Driver)(nil)
	_ gpuDriver = (*hip.Driver)(nil)
)

// opts are the options both drivers take (cuda.Options converts to and
// from it; hip.Options has them and no_capture).
type opts = gpurt.Options

// vendorCase is one vendor: its fake, its names and its messages.
type vendorCase struct {
	name      string // backend name
	fake      *gpurttest.Fake
	envPrefix string // of the fake's knobs: FAKE_CUDA_FAIL, ...
	// names of the calls whose names are not prefix+the gpurt.Syms name
	prefix, hostAlloc, hostFree string
	open                        func(o opts) (gpuDriver, error)
	// openKernels opens a driver over the fake at lib that can load the
	// kernels (hip: compiled by the fake's hiprtc).
	openKernels func(lib string, o opts) (gpuDriver, error)
	// Names of the vendor's module calls: kernel launch, module unload,
	// and the call that sets the thread's context (cuda) or device (hip).
	launch, unload, setCurrent string
	// failed is how an error message names call's code.
	failed func(call string, code int) string
	// says is how an error message names call's code with the runtime's
	// text for it.
	says func(call, code, text string) string
	// code is the code of the vendor's typed error inside err.
	code func(err error) (int, bool)
	// totalMemFrom is where the total memory comes from when the
	// memory-info call fails or under-reports, and totalMemEnv the fake's
	// knob (after envPrefix) that sets it.
	totalMemFrom, totalMemEnv string
	// notRuntime is how the loader refuses a library that is not the
	// runtime.
	notRuntime string
}

var vendors = []vendorCase{
	{
		name: "cuda", fake: fakes.CUDA, envPrefix: "FAKE_CUDA_",
		prefix: "cuda", hostAlloc: "cudaHostAlloc", hostFree: "cudaFreeHost",
		open: func(o opts) (gpuDriver, error) {
			return cuda.New(cuda.Options(documented(o)))
		},
		openKernels: func(_ string, o opts) (gpuDriver, error) {
			return cuda.New(cuda.Options(documented(o)))
		},
		launch: "cuLaunchKernel", unload: "cuModuleUnload", setCurrent: "cuCtxSetCurrent",
		failed: func(call string, code int) string { return fmt.Sprintf("%s returned %d", call, code) },
		says:   func(call, code, text string) string { return call + " returned " + code + " (" + text + ")" },
		// read at offset 288 of struct cudaDeviceProp
		totalMemFrom: "cudaDeviceProp.totalGlobalMem", totalMemEnv: "PROP_MEM",
		notRuntime: ": not a CUDA runtime: no symbol cudaRuntimeGetVersion",
		code:       errorCode[*cuda.Error],
	},
	{
		name: "hip", fake: fakes.HIP, envPrefix: "FAKE_HIP_",
		prefix: "hip", hostAlloc: "hipHostMalloc", hostFree: "hipHostFree",
		open: func(o opts) (gpuDriver, error) {
			return hip.New(hipOptions(documented(o)))
		},
		openKernels: func(_ string, o opts) (gpuDriver, error) {
			return hip.New(hipOptions(documented(o))) // the default compiler: the fake runtime's own hiprtc
		},
		launch: "hipModuleLaunchKernel", unload: "hipModuleUnload", setCurrent: "hipSetDevice",
		failed: func(call string, code int) string {
			return fmt.Sprintf("%s: %s, %d)", call, map[int]string{
				2:   "out of memory (hipErrorOutOfMemory",
				900: "stream capture unsupported (hipErrorStreamCaptureUnsupported",
				908: "stream capture wrong thread (hipErrorStreamCaptureWrongThread",
				999: "unknown (hipErrorUnknown",
			}[code], code)
		},
		says:         func(call, _, text string) string { return call + ": " + text },
		totalMemFrom: "hipDeviceTotalMem", totalMemEnv: "MEM",
		notRuntime: ": not a HIP runtime: no symbol hipRuntimeGetVersion",
		code:       errorCode[*hip.Error],
	},
}

// errorCode is the code of the vendor's Error (a gpurt.CallError) that err
// holds, if it holds one.
func errorCode[E interface {
	*cuda.Error | *hip.Error
	error
}](err error) (int, bool) {
	var e E
	if !errors.As(err, &e) {
		return 0, false
	}
	return (*gpurt.CallError)(e).Code, true
}

// hipOptions are the hip driver's options for o.
func hipOptions(o opts) hip.Options {
	return hip.Options{Device: o.Device, ReleaseThreshold: o.ReleaseThreshold, Reserve: o.Reserve,
		DefaultPool: o.DefaultPool, StreamPriority: o.StreamPriority, Blocking: o.Blocking, IPC: o.IPC, HostMemory: o.HostMemory,
		CaptureSafety: o.CaptureSafety}
}

// documented is o with the documented capture safety unless o asks for
// one: the fakes implement CUDA's documented rules (the H100's table),
// and the fake device, unrecorded, would otherwise be strict
// (docs/capture-safety.md; TestFakeSafetyProfile checks that).
func documented(o opts) opts {
	if o.CaptureSafety == driver.SafetyUnset {
		o.CaptureSafety = driver.SafetyDocumented
	}
	return o
}

// forEach runs test once per vendor, as a subtest named after it.
func forEach(t *testing.T, test func(t *testing.T, v *vendorCase)) {
	for i := range vendors {
		v := &vendors[i]
		t.Run(v.name, func(t *testing.T) { test(t, v) })
	}
}

// runChild runs test's subtest for v in a child process of this test
// binary, with env set to v's name and spec (for asChild) and files as its
// fds from 3 on, and requires it to pass.
func runChild(t *testing.T, v *vendorCase, test, env, spec string, files ...*os.File) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$/^"+v.name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+v.name+":"+spec)
	cmd.ExtraFiles = files
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "child: %s", out)
}

// asChild reports whether this process is a child runChild started
// through env, and then runs child with its spec for the vendor it was
// started for: a child does nothing else.
func asChild(t *testing.T, v *vendorCase, env string, child func(t *testing.T, v *vendorCase, spec string)) bool {
	spec := os.Getenv(env)
	if spec == "" {
		return false
	}
	if name, spec, _ := strings.Cut(spec, ":"); name == v.name {
		child(t, v, spec)
	}
	return true
}

// fn is the vendor's name of a gpurt.Syms function ("MemPoolDestroy" ->
// "cudaMemPoolDestroy").
func (v *vendorCase) fn(name string) string {
	switch name {
	case "HostAlloc":
		return v.hostAlloc
	case "HostFree":
		return v.hostFree
	}
	return v.prefix + name
}

// fail makes the fake fail its next calls of fn with code ("" to stop).
func (v *vendorCase) fail(t *testing.T, spec string) { t.Setenv(v.envPrefix+"FAIL", spec) }

// fakeLib compiles the vendor's fake, with preprocessor flags, into a
// fresh path (a fresh load, so a fresh version and state) and points the
// vendor's library variable at it. Without gcc the test is skipped.
func fakeLib(t testing.TB, v *vendorCase, cflags ...string) string {
	t.Helper()
	return v.fake.Lib(t, cflags...)
}

type fakeLog = gpurttest.Log

func openFakeLog(t testing.TB, path string) *fakeLog { t.Helper(); return gpurttest.OpenLog(t, path) }

// find returns the log lines that contain every part.
func find(lines []string, parts ...string) []string { return gpurttest.Find(lines, parts...) }

// openFake opens a driver on a fresh build of the vendor's fake.
func openFake(t testing.TB, v *vendorCase, o opts) (gpuDriver, *fakeLog) {
	t.Helper()
	return gpurttest.Open(t, v.fake, v.open, o)
}

// endCapture ends a's capture, which must succeed (msgAndArgs say why),
// and closes the graph.
func endCapture(t testing.TB, a *alloc.Allocator, msgAndArgs ...any) {
	t.Helper()
	g, err := a.EndCapture()
	require.NoError(t, err, msgAndArgs...)
	require.NoError(t, g.Close())
}

// malloc is d.Malloc's allocation, failing the test on its error.
func malloc(t testing.TB, d gpuDriver, size int64) driver.DevicePtr {
	t.Helper()
	p, err := d.Malloc(size)
	require.NoError(t, err)
	return p
}

// hostAlloc is d.HostAlloc's pinned memory, failing the test on its error.
func hostAlloc(t testing.TB, d gpuDriver, size int64) []byte {
	t.Helper()
	h, err := d.HostAlloc(size)
	require.NoError(t, err)
	return h
}

// fill writes b at p through a blocking copy on a fresh stream.
func fill(t *testing.T, d gpuDriver, p driver.DevicePtr, b []byte) {
	t.Helper()
	s := newStream(t, d)
	defer d.DestroyStream(s)
	require.NoError(t, d.CopyHtoD(p, b, s))
}

// read reads n bytes at p.
func read(t *testing.T, d gpuDriver, p driver.DevicePtr, n int) []byte {
	t.Helper()
	s := newStream(t, d)
	defer d.DestroyStream(s)
	out := make([]byte, n)
	require.NoError(t, d.CopyDtoH(out, p, s))
	return out
}
