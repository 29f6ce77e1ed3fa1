package callstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ebitengine/purego"
)

// A Go callback entered from C (purego) with a junk frame-pointer register
// (C compiled without frame pointers leaves any value there): the walk
// stops where the chain leaves Go frames instead of following the junk.
// The stack still starts at the callback.
func TestCallbackFromCWithJunkFramePointer(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("no C compiler for the callback library:", err)
	}
	lib := filepath.Join(t.TempDir(), "libjunkbp.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-fomit-frame-pointer", "-o", lib, "testdata/junkbp.c", "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var callWithBP, callOnThread func(fn, bp uintptr)
	var callNearSP func(fn uintptr)
	purego.RegisterLibFunc(&callWithBP, h, "call_with_bp")
	purego.RegisterLibFunc(&callOnThread, h, "call_on_thread")
	purego.RegisterLibFunc(&callNearSP, h, "call_near_sp")

	var got []string
	cb := purego.NewCallback(func() {
		var pcs [64]uintptr
		got = funcs(pcs[:Callers(0, pcs[:])])
	})
	junk := []uintptr{
		0, 1, 0x1000, // null, odd, low: below the Go frames
		0xdead_beef_0000, 0x7fff_ffff_f000, // unmapped, far above them
		1 << 62, ^uintptr(0) &^ 7, // beyond the address space
	}
	for _, bp := range junk {
		for _, call := range []struct {
			name string
			do   func()
		}{
			{"same thread", func() { callWithBP(cb, bp) }},
			{"C thread", func() { callOnThread(cb, bp) }},
		} {
			got = nil
			call.do()
			t.Logf("bp %#x, %s: %q", bp, call.name, got)
			if len(got) == 0 || got[0] != "github.com/capalloc/capalloc/internal/callstack.TestCallbackFromCWithJunkFramePointer.func1" {
				t.Fatalf("bp %#x, %s: stack %q does not start at the callback", bp, call.name, got)
			}
		}
	}
	got = nil
	callNearSP(cb)
	if len(got) == 0 {
		t.Fatal("no stack from a callback with %rbp near the C stack pointer")
	}
}
