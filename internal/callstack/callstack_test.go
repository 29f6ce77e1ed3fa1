package callstack

import (
	"runtime"
	"slices"
	"testing"
)

// funcs expands return addresses into function names, inlined calls
// included, as the profile writer does.
func funcs(pcs []uintptr) []string {
	var out []string
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		out = append(out, f.Function)
		if !more {
			return out
		}
	}
}

//go:noinline
func leaf(skip int, pcs []uintptr) (int, int) {
	var ref [32]uintptr
	m := runtime.Callers(1, ref[:]) // leaf and up
	n := Callers(skip, pcs)
	return n, m
}

//go:noinline
func middle(skip int, pcs []uintptr, ref *[]string) int {
	n, _ := leaf(skip, pcs)
	var r [32]uintptr
	m := runtime.Callers(1, r[:]) // middle and up
	*ref = funcs(r[:m])
	return n
}

// The stack matches runtime.Callers' frame for frame, wrappers aside
// (runtime.Callers elides the go statement's wrapper, frame pointers see it).
func TestCallersMatchesRuntime(t *testing.T) {
	var pcs [32]uintptr
	var ref []string
	n := middle(0, pcs[:], &ref)
	got := funcs(pcs[:n])
	prefix := "github.com/capalloc/capalloc/internal/callstack."
	if got[0] != prefix+"leaf" || got[1] != prefix+"middle" || got[2] != prefix+"TestCallersMatchesRuntime" {
		t.Fatalf("stack %q does not start leaf, middle, the test", got)
	}
	drop := func(fs []string) []string {
		return slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == "testing.(*T).Run.gowrap1" })
	}
	if want := append([]string{prefix + "leaf"}, ref...); !slices.Equal(drop(got), drop(want)) {
		t.Fatalf("frame pointers give %q, runtime.Callers %q", got, want)
	}

	n = middle(1, pcs[:], &ref) // skip leaf
	if got := funcs(pcs[:n]); got[0] != prefix+"middle" {
		t.Fatalf("skip 1 starts at %q", got[0])
	}
	n = middle(0, pcs[:2], &ref)
	if n != 2 {
		t.Fatalf("a two-entry buffer got %d", n)
	}
}

var sink int

func BenchmarkCallers(b *testing.B) {
	var pcs [32]uintptr
	b.Run("impl=callstack", func(b *testing.B) {
		for b.Loop() {
			sink = Callers(0, pcs[:])
		}
	})
	b.Run("impl=runtime", func(b *testing.B) {
		for b.Loop() {
			sink = runtime.Callers(1, pcs[:])
		}
	})
}
