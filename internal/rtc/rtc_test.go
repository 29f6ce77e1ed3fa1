package rtc

import (
	"errors"
	"strings"
	"testing"

	"github.com/ebitengine/purego"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// badSource has a syntax error on line 1 ("1 +;").
const badSource = "extern \"C\" __global__ void k(int *p) { *p = 1 +; }\n"

func openNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	return openCompiler(t, OpenNVRTC, "no NVRTC installed (Debian: libnvrtc11.2, contrib/non-free)")
}

func openHIPRTC(t *testing.T) *HIPRTC {
	t.Helper()
	return openCompiler(t, OpenHIPRTC, "no hiprtc installed (Debian: libamdhip64-5 with libamd-comgr2)")
}

// openCompiler opens a runtime compiler, skipping the test with absent
// where it is not installed; any other failure fails the test.
func openCompiler[C any](t *testing.T, open func() (C, error), absent string) C {
	t.Helper()
	c, err := open()
	if errors.Is(err, driver.ErrBackendUnavailable) {
		t.Skipf("%s: %v", absent, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// checkCompileError: a rejected source is ErrCompile, and the error
// carries the compiler's log, which names the source and the fault.
func checkCompileError(t *testing.T, out []byte, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrCompile) {
		t.Fatalf("a source with a syntax error: got %d bytes, error %v; want ErrCompile", len(out), err)
	}
	for _, w := range []string{"bad.cu", want} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not carry %q from the compiler's log:\n%v", w, err)
		}
	}
}

func TestNVRTCRejectsBadSource(t *testing.T) {
	n := openNVRTC(t)
	out, err := n.CompilePTX(badSource, "bad.cu", []string{"--gpu-architecture=compute_70"})
	checkCompileError(t, out, err, "expected an expression")
}

func TestHIPRTCRejectsBadSource(t *testing.T) {
	r := openHIPRTC(t)
	out, err := r.CompileHIP(badSource, "bad.cu", "gfx90a")
	checkCompileError(t, out, err, "error: expected expression")
}

// A good source compiles with both, the way the bad one is compiled: the
// rejection above is the source's, not the options'.
func TestCompileSmallKernel(t *testing.T) {
	const good = "extern \"C\" __global__ void k(int *p) { *p = 1; }\n"
	t.Run("nvrtc", func(t *testing.T) {
		ptx, err := openNVRTC(t).CompilePTX(good, "good.cu", []string{"--gpu-architecture=compute_70"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(ptx), ".entry k(") || strings.HasSuffix(string(ptx), "\x00") {
			t.Fatalf("PTX without the kernel, or with its NUL:\n%s", ptx)
		}
	})
	t.Run("hiprtc", func(t *testing.T) {
		code, err := openHIPRTC(t).CompileHIP(good, "good.cu", "gfx90a")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(code), "\x7fELF") {
			t.Fatalf("the code object is not an ELF file: % x", code[:min(16, len(code))])
		}
	})
}

// An arch that is not a gcnArchName is refused before any call into
// hiprtc (the zero HIPRTC has no entry points: a call would crash).
func TestCompileHIPRefusesBadArch(t *testing.T) {
	var r HIPRTC
	for _, arch := range []string{"", "sm_70", "gfx90a --save-temps", "-O0", "gfx90a:xnack"} {
		if _, err := r.CompileHIP("", "k.cu", arch); !errors.Is(err, alloc.ErrInvalidValue) {
			t.Errorf("arch %q: got %v, want ErrInvalidValue", arch, err)
		}
	}
}

// A library that is not there, or has no compiler in it, is
// ErrBackendUnavailable naming what was searched and why.
func TestOpenMissingLibrary(t *testing.T) {
	const missing = "/nonexistent/librtc-missing.so"
	t.Setenv("CAPALLOC_NVRTC_LIB", missing)
	t.Setenv("CAPALLOC_HIPRTC_LIB", missing)
	_, nerr := OpenNVRTC()
	_, herr := OpenHIPRTC()
	for what, err := range map[string]error{"NVRTC": nerr, "hiprtc": herr} {
		if !errors.Is(err, driver.ErrBackendUnavailable) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "no usable "+what) {
			t.Errorf("%s from %s: got %v, want ErrBackendUnavailable naming it", what, missing, err)
		}
	}
}

func TestHIPRTCInLibraryWithoutIt(t *testing.T) {
	h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Skipf("no libc.so.6 to stand for a library without hiprtc: %v", err)
	}
	_, err = HIPRTCIn("libc.so.6", h)
	if !errors.Is(err, driver.ErrBackendUnavailable) || !strings.Contains(err.Error(), "libc.so.6 has no hiprtc: lacks hiprtcCreateProgram") {
		t.Fatalf("got %v, want ErrBackendUnavailable naming the library and what it lacks", err)
	}
}

// The hip driver binds hiprtc in the libamdhip64 it opened (ROCm 5.x,
// where hiprtc lives in it).
func TestHIPRTCInAMDHIP64(t *testing.T) {
	const lib = "libamdhip64.so.5"
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Skipf("no %s (Debian: libamdhip64-5): %v", lib, err)
	}
	r, err := HIPRTCIn(lib, h)
	if err != nil {
		t.Fatal(err)
	}
	code, err := r.CompileHIP("extern \"C\" __global__ void k(int *p) { *p = 1; }\n", "good.cu", "gfx1030")
	if err != nil || !strings.HasPrefix(string(code), "\x7fELF") {
		t.Fatalf("compiling through %s's hiprtc: %d bytes, %v", lib, len(code), err)
	}
	major, minor := r.Version()
	t.Logf("%s: hiprtc %d.%d", lib, major, minor)
}
