package gpurt_test

// The fake-runtime tests that are the same for both vendors, run once per
// vendor from one table: the fake libcudart (cuda/testdata/fakecudart.c)
// and the fake libamdhip64 (hip/testdata/fakehip.c), each on the shared
// core internal/fakegpu/core.c, are compiled with gcc and loaded through
// the vendor's library variable, so the purego marshalling of every bound
// call runs here without a GPU. What only one vendor has stays in its
// package's tests.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
	"github.com/capalloc/capalloc/backends/plugin"
	"github.com/capalloc/capalloc/cuda"
	"github.com/capalloc/capalloc/hip"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// TestMain lets this test binary serve as its own plugin process, so
// plugin:cuda and plugin:hip run the drivers in a child over the fakes.
func TestMain(m *testing.M) {
	plugin.ServeIfChild()
	os.Exit(m.Run())
}

// gpuDriver is what both vendor drivers offer (gpurt.Driver's methods).
type gpuDriver interface {
	alloc.Driver
	alloc.HostFuncLauncher
	alloc.IPCMemory
	alloc.StreamIdler
	alloc.PoolTrimmer
	alloc.GraphMemTrimmer
	gpurt.Embedder
	WaitClosed(ctx context.Context) error
	Warnings() []string
	OnDevice(op string, fn func() error) error
	ExportPool() (int, error)
	ExportPointer(p alloc.DevicePtr) ([]byte, error)
	ImportPool(fd int) (*gpurt.ImportedPool, error)
}

var (
	_ gpuDriver = (*cuda.Driver)(nil)
	_ gpuDriver = (*hip.Driver)(nil)
)

// opts are the options the shared tests set, for either vendor.
type opts struct {
	Blocking   bool
	IPC        bool
	HostMemory backends.HostMemory
}

// vendorCase is one vendor: its fake, its names and its messages.
type vendorCase struct {
	name      string // backend name
	libEnv    string // the library override
	src       string // the fake's source
	envPrefix string // of the fake's knobs: FAKE_CUDA_FAIL, ...
	// names of the calls whose names are not prefix+the gpurt.Syms name
	prefix, hostAlloc, hostFree string
	open                        func(o opts) (gpuDriver, error)
	// failed is how an error message names call's code.
	failed func(call string, code int) string
}

var vendors = []vendorCase{
	{
		name: "cuda", libEnv: cuda.LibEnv, src: "../../cuda/testdata/fakecudart.c", envPrefix: "FAKE_CUDA_",
		prefix: "cuda", hostAlloc: "cudaHostAlloc", hostFree: "cudaFreeHost",
		open: func(o opts) (gpuDriver, error) {
			return cuda.New(cuda.Options{Blocking: o.Blocking, IPC: o.IPC, HostMemory: o.HostMemory})
		},
		failed: func(call string, code int) string { return fmt.Sprintf("%s returned %d", call, code) },
	},
	{
		name: "hip", libEnv: hip.LibEnv, src: "../../hip/testdata/fakehip.c", envPrefix: "FAKE_HIP_",
		prefix: "hip", hostAlloc: "hipHostMalloc", hostFree: "hipHostFree",
		open: func(o opts) (gpuDriver, error) {
			return hip.New(hip.Options{Blocking: o.Blocking, IPC: o.IPC, HostMemory: o.HostMemory})
		},
		failed: func(call string, code int) string {
			return fmt.Sprintf("%s: %s, %d)", call, map[int]string{
				2:   "out of memory (hipErrorOutOfMemory",
				900: "stream capture unsupported (hipErrorStreamCaptureUnsupported",
				908: "stream capture wrong thread (hipErrorStreamCaptureWrongThread",
			}[code], code)
		},
	},
}

// forEach runs test once per vendor, as a subtest named after it.
func forEach(t *testing.T, test func(t *testing.T, v *vendorCase)) {
	for i := range vendors {
		v := &vendors[i]
		t.Run(v.name, func(t *testing.T) { test(t, v) })
	}
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

var (
	fakeMu  sync.Mutex
	fakeDir string
)

// fakeLib compiles the vendor's fake, with preprocessor flags, into a
// fresh path (a fresh load, so a fresh version and state) and points the
// vendor's library variable at it. Without gcc the test is skipped.
func fakeLib(t testing.TB, v *vendorCase, cflags ...string) string {
	t.Helper()
	cc := os.Getenv("CC") // CC=aarch64-linux-gnu-gcc for an arm64 test binary under qemu
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("fake runtimes not built (no %s): %v", cc, err)
	}
	src, err := os.ReadFile(v.src)
	if err != nil {
		t.Skipf("fake runtime source missing: %v", err)
	}
	fakeMu.Lock()
	if fakeDir == "" {
		fakeDir, err = os.MkdirTemp("", "fakegpurt")
	}
	dir := fakeDir
	fakeMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(dir, "lib"+v.name+"-*.so")
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	core, err := filepath.Abs(filepath.Join("..", "fakegpu"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-shared", "-fPIC", "-I", core, "-o", out.Name(), "-O1"}, cflags...)
	cmd := exec.Command(cc, append(args, "-x", "c", "-", "-lpthread")...)
	cmd.Stdin = bytes.NewReader(src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, msg)
	}
	t.Setenv(v.libEnv, out.Name())
	return out.Name()
}

// fakeLog reads (and clears) the fake's call log.
type fakeLog struct {
	read, reset uintptr
}

func openFakeLog(t testing.TB, path string) *fakeLog {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLog{}
	if l.read, err = purego.Dlsym(h, "fake_log"); err != nil {
		t.Fatal(err)
	}
	if l.reset, err = purego.Dlsym(h, "fake_log_reset"); err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *fakeLog) lines() []string {
	buf := make([]byte, 1<<20)
	r1, _, _ := purego.SyscallN(l.read, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	s := strings.TrimSpace(string(buf[:r1]))
	purego.SyscallN(l.reset)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// find returns the log lines that contain every part.
func find(lines []string, parts ...string) []string {
	var out []string
next:
	for _, l := range lines {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// openFake builds the vendor's fake and opens a driver on it, closed at
// the end of the test.
func openFake(t testing.TB, v *vendorCase, o opts) (gpuDriver, *fakeLog) {
	t.Helper()
	path := fakeLib(t, v)
	log := openFakeLog(t, path)
	d, err := v.open(o)
	if err != nil {
		t.Fatalf("open on the fake runtime: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, log
}

// fill writes b at p through a blocking copy on a fresh stream.
func fill(t *testing.T, d gpuDriver, p alloc.DevicePtr, b []byte) {
	t.Helper()
	s, err := d.CreateStream()
	require.NoError(t, err)
	defer d.DestroyStream(s)
	require.NoError(t, d.CopyHtoD(p, b, s))
}

// read reads n bytes at p.
func read(t *testing.T, d gpuDriver, p alloc.DevicePtr, n int) []byte {
	t.Helper()
	s, err := d.CreateStream()
	require.NoError(t, err)
	defer d.DestroyStream(s)
	out := make([]byte, n)
	require.NoError(t, d.CopyDtoH(out, p, s))
	return out
}
