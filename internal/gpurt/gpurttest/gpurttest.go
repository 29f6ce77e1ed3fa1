// Package gpurttest builds and reads the fake GPU runtimes the tests load
// instead of libcudart and libamdhip64: cuda/testdata/fakecudart.c and
// hip/testdata/fakehip.c, each a vendor's front on the shared core
// internal/fakegpu/core.c (memory, streams, captures and their rules,
// graphs, pools, IPC, the call log). The fakes are C test fixtures
// compiled with $CC (default gcc) at test time; the library itself has no
// cgo. Only tests import this package.
package gpurttest

import (
	"bytes"
	"crypto/sha256"
	"errors"
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
	src  []byte
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

// Prepare reads the fake's source once, or skips the test without a C
// compiler or without the source.
func (f *Fake) Prepare(t testing.TB) {
	t.Helper()
	f.once.Do(func() {
		if _, f.err = exec.LookPath(CC()); f.err != nil {
			return
		}
		var root string
		if root, f.err = moduleRoot(); f.err != nil {
			return
		}
		if f.src, f.err = os.ReadFile(filepath.Join(root, f.Src)); f.err == nil {
			f.dir, f.err = os.MkdirTemp("", "fake"+strings.TrimPrefix(f.Name, "lib"))
		}
	})
	if f.err != nil {
		t.Skipf("fake %s not built (%s or testdata missing): %v", f.Name, CC(), f.err)
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

// Build compiles the fake to path with preprocessor flags.
func (f *Fake) Build(t testing.TB, path string, cflags ...string) {
	t.Helper()
	f.Prepare(t)
	BuildShared(t, path, f.src, append([]string{"-O1"}, cflags...)...)
}

// BuildShared compiles C source into a shared library at path, with the
// shared core's folder on the include path; it skips without a compiler.
// Each variant (compiler, flags, source) is compiled once per test process
// and copied to every path that asks for it: a new file, so loading it is
// a fresh load with fresh state, without another compile.
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
	lib, err := compile(args, src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, lib, 0o755); err != nil {
		t.Fatal(err)
	}
}

// compiled holds, for the life of the test process, every library
// BuildShared compiled, by compiler, arguments and source. The fake-runtime
// tests load a fresh build for almost every test, mostly of the same few
// variants; compiling each one took most of their time (issue 21: 92
// compiles in internal/gpurt's tests alone).
var compiled sync.Map // sha256 of CC, args and source -> *compilation

type compilation struct {
	once sync.Once
	lib  []byte
	err  error
}

// compile returns the library CC makes of src with args, compiling it the
// first time it is asked for.
func compile(args []string, src []byte) ([]byte, error) {
	h := sha256.New()
	for _, a := range append([]string{CC()}, args...) {
		h.Write([]byte(a))
		h.Write([]byte{0})
	}
	h.Write(src)
	v, _ := compiled.LoadOrStore(string(h.Sum(nil)), new(compilation))
	c := v.(*compilation)
	c.once.Do(func() { c.lib, c.err = compileNow(args, src) })
	return c.lib, c.err
}

// compileNow runs CC on src and returns the library it wrote.
func compileNow(args []string, src []byte) ([]byte, error) {
	dir, err := os.MkdirTemp("", "capalloc-fake")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "lib.so")
	cmd := exec.Command(CC(), append(append([]string{"-o", out}, args...), "-x", "c", "-", "-lpthread")...)
	cmd.Stdin = bytes.NewReader(src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", CC(), err, msg)
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
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("gpurttest: no go.mod above the working directory")
		}
		dir = up
	}
}

// Log reads (and clears) a fake's call log.
type Log struct {
	read, reset uintptr
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
	return l
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
