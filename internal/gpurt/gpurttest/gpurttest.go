// Package gpurttest builds and reads the fake GPU runtimes the tests load
// instead of libcudart and libamdhip64: cuda/testdata/fakecudart.c and
// hip/testdata/fakehip.c, each a vendor's front on the shared core
// internal/fakegpu/core.c (memory, streams, captures and their rules,
// graphs, pools, IPC, modules and kernel launches, the call log), linked
// with the host build of the library's kernels (build.go). The fakes are
// C and C++ test fixtures compiled with $CC and $CXX (default gcc, g++) at
// test time; the library itself has no cgo. Only tests import this
// package.
package gpurttest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Fake is one vendor's fake runtime.
type Fake struct {
	Src    string // its source, relative to the module root
	Name   string // the file name prefix of its builds ("libcudart")
	LibEnv string // the variable the driver loads its library from

	once sync.Once
	src  string // its absolute path
	dir  string
	err  error
}

// CC is the C compiler for the fakes: $CC, else gcc (CC=aarch64-linux-gnu-gcc
// to run an arm64 test binary under qemu).
func CC() string {
	if cc := os.Getenv("CC"); cc != "" {
		return cc
	}
	return "gcc"
}

// Prepare finds the fake's source once, or skips the test without a C or
// C++ compiler or without the source.
func (f *Fake) Prepare(t testing.TB) {
	t.Helper()
	f.once.Do(func() {
		if _, f.err = exec.LookPath(CC()); f.err != nil {
			return
		}
		if _, f.err = exec.LookPath(CXX()); f.err != nil {
			return
		}
		var root string
		if root, f.err = moduleRoot(); f.err != nil {
			return
		}
		f.src = filepath.Join(root, f.Src)
		if _, f.err = os.Stat(f.src); f.err == nil {
			f.dir, f.err = os.MkdirTemp("", "fake"+strings.TrimPrefix(f.Name, "lib"))
		}
	})
	if f.err != nil {
		t.Skipf("fake %s not built (%s, %s or testdata missing): %v", f.Name, CC(), CXX(), f.err)
	}
}

// New compiles the fake, with preprocessor flags, into a fresh path (a
// fresh load, so a fresh version and state) and returns it.
func (f *Fake) New(t testing.TB, cflags ...string) string {
	t.Helper()
	f.Prepare(t)
	out, err := os.CreateTemp(f.dir, f.Name+"-*.so")
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
	f.Build(t, out.Name(), cflags...)
	return out.Name()
}

// Lib is New, with the driver's library variable pointed at the build for
// the rest of the test.
func (f *Fake) Lib(t testing.TB, cflags ...string) string {
	t.Helper()
	path := f.New(t, cflags...)
	t.Setenv(f.LibEnv, path)
	return path
}

// Build compiles the fake to path with preprocessor flags (BuildFake),
// once per variant and test process (buildCached).
func (f *Fake) Build(t testing.TB, path string, cflags ...string) {
	t.Helper()
	f.Prepare(t)
	flags := append([]string{"-O1"}, cflags...)
	key := strings.Join(append([]string{"fake", f.src, CC(), CXX()}, flags...), "\x00")
	if err := buildCached(path, key, func(out string) error { return BuildFake(f.src, out, flags...) }); err != nil {
		t.Fatal(err)
	}
}

// BuildShared compiles C source into a shared library at path, with the
// shared core's folder on the include path, once per variant and test
// process (buildCached); it skips without a compiler.
func BuildShared(t testing.TB, path string, src []byte, cflags ...string) {
	t.Helper()
	if _, err := exec.LookPath(CC()); err != nil {
		t.Skipf("no C compiler for the fakes: %v", err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-shared", "-fPIC", "-I", filepath.Join(root, "internal", "fakegpu")}, cflags...)
	sum := sha256.Sum256(src)
	key := strings.Join(append([]string{"shared", string(sum[:]), CC()}, args...), "\x00")
	if err := buildCached(path, key, func(out string) error {
		cmd := exec.Command(CC(), append(append(args, "-o", out), "-x", "c", "-", "-lpthread")...)
		cmd.Stdin = bytes.NewReader(src)
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", CC(), err, msg)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// built holds, for the life of the test process, every library built
// here, by what went into it. The fake-runtime tests load a fresh build
// for almost every test, mostly of the same few variants, and compiling
// each one would take most of their time (92 compiles in internal/gpurt's
// tests alone, 0.45 s each).
var built sync.Map // key -> *buildOnce

type buildOnce struct {
	once sync.Once
	lib  []byte
	err  error
}

// buildCached writes to path the library build makes, running build only
// the first time this process asks for key. path is a new file, so loading
// it is still a fresh load with fresh state (the loader would hand back an
// already loaded library for the same file).
func buildCached(path, key string, build func(out string) error) error {
	v, _ := built.LoadOrStore(key, new(buildOnce))
	b := v.(*buildOnce)
	b.once.Do(func() { b.lib, b.err = buildBytes(build) })
	if b.err != nil {
		return b.err
	}
	return os.WriteFile(path, b.lib, 0o755)
}

// buildBytes runs build into a temporary file and returns what it wrote.
func buildBytes(build func(out string) error) ([]byte, error) {
	dir, err := os.MkdirTemp("", "capalloc-fake")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "lib.so")
	if err := build(out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// moduleRoot is the folder of go.mod above the working directory (a test
// runs in its package's folder).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return rootAbove(dir)
}

// Log reads (and clears) a fake's call log.
type Log struct {
	read, reset, resetFaults uintptr
}

// OpenLog opens the call log of the fake loaded from path.
func OpenLog(t testing.TB, path string) *Log {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	l := &Log{}
	if l.read, err = purego.Dlsym(h, "fake_log"); err != nil {
		t.Fatal(err)
	}
	if l.reset, err = purego.Dlsym(h, "fake_log_reset"); err != nil {
		t.Fatal(err)
	}
	if l.resetFaults, err = purego.Dlsym(h, "fake_reset_faults"); err != nil {
		t.Fatal(err)
	}
	return l
}

// ResetFaults makes the fake's devices usable again after a kernel's
// fault, which loses its device as on a GPU (every later call on it fails
// with the fault's code): tests that fault on purpose call it to go on.
func (l *Log) ResetFaults() {
	purego.SyscallN(l.resetFaults)
}

// Lines returns the calls logged since the last Lines, and clears them.
func (l *Log) Lines() []string {
	buf := make([]byte, 1<<20)
	r1, _, _ := purego.SyscallN(l.read, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
	s := strings.TrimSpace(string(buf[:r1]))
	purego.SyscallN(l.reset)
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Find returns the log lines that contain every part.
func Find(lines []string, parts ...string) []string {
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

// Open builds the fake, points the driver's library variable at it, opens
// a driver on it with open(o), closed at the end of the test, and returns
// it with the fake's call log.
func Open[O any, D interface{ Close() error }](t testing.TB, f *Fake, open func(O) (D, error), o O) (D, *Log) {
	t.Helper()
	path := f.Lib(t)
	log := OpenLog(t, path)
	d, err := open(o)
	if err != nil {
		t.Fatalf("open on the fake runtime: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, log
}

// Opener is Open for one vendor's fake and open: a package's openFake.
func Opener[O any, D interface{ Close() error }](f *Fake, open func(O) (D, error)) func(testing.TB, O) (D, *Log) {
	return func(t testing.TB, o O) (D, *Log) {
		t.Helper()
		return Open(t, f, open, o)
	}
}
