package cuda

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The fake libcudart (testdata/fakecudart.c) is compiled once per test
// binary with gcc and loaded through CAPALLOC_CUDA_LIB, so the purego
// marshalling of every bound call runs here without a GPU.

var (
	fakeOnce sync.Once
	fakeSrc  []byte
	fakeDir  string
	fakeErr  error
)

// fakeLib compiles the fake into a fresh path (a fresh load, so a fresh
// version and state) and points CAPALLOC_CUDA_LIB at it.
func fakeLib(t testing.TB) string {
	t.Helper()
	return fakeLibWith(t)
}

// fakeLibWith is fakeLib with preprocessor flags (-DFAKE_NO_GRAPH_MEM_TRIM).
func fakeLibWith(t testing.TB, cflags ...string) string {
	t.Helper()
	prepareFake(t)
	out, err := os.CreateTemp(fakeDir, "libcudart-*.so")
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	buildFake(t, out.Name(), cflags...)
	t.Setenv(LibEnv, out.Name())
	return out.Name()
}

// prepareFake reads the fake's source once, or skips the test without gcc.
func prepareFake(t testing.TB) {
	t.Helper()
	fakeOnce.Do(func() {
		if _, err := exec.LookPath(fakeCC()); err != nil {
			fakeErr = err
			return
		}
		fakeSrc, fakeErr = os.ReadFile(filepath.Join("testdata", "fakecudart.c"))
		if fakeErr == nil {
			fakeDir, fakeErr = os.MkdirTemp("", "fakecudart")
		}
	})
	if fakeErr != nil {
		t.Skipf("fake libcudart not built (gcc or testdata missing): %v", fakeErr)
	}
}

// buildFake compiles the fake to path with preprocessor flags.
func buildFake(t testing.TB, path string, cflags ...string) {
	t.Helper()
	prepareFake(t)
	buildShared(t, path, fakeSrc, append([]string{"-O1"}, cflags...)...)
}

// buildShared compiles C source into a shared library at path with gcc
// (a test fixture: the package itself has no cgo); it skips without gcc.
// The fake's runtime-independent core, shared with the HIP fake, is found
// in internal/fakegpu.
func buildShared(t testing.TB, path string, src []byte, cflags ...string) {
	t.Helper()
	prepareFake(t)
	core, err := filepath.Abs(filepath.Join("..", "internal", "fakegpu"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-shared", "-fPIC", "-I", core, "-o", path}, cflags...)
	cmd := exec.Command(fakeCC(), append(args, "-x", "c", "-", "-lpthread")...)
	cmd.Stdin = bytes.NewReader(src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, msg)
	}
}

// fakeCC is the C compiler for the fakes: $CC, else gcc
// (CC=aarch64-linux-gnu-gcc to run an arm64 test binary under qemu).
func fakeCC() string {
	if cc := os.Getenv("CC"); cc != "" {
		return cc
	}
	return "gcc"
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

func openFake(t testing.TB, opts Options) (*Driver, *fakeLog) {
	t.Helper()
	path := fakeLib(t)
	log := openFakeLog(t, path)
	d, err := New(opts)
	if err != nil {
		t.Fatalf("open on the fake runtime: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, log
}
