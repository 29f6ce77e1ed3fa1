package alloc_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// Allocation wrappers small enough to be inlined, at two depths, as an
// engine's always are: no //go:noinline here.
func inlinedAlloc(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

func inlinedTwice(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return inlinedAlloc(a, n) }

// stackDriver remembers the stack of the latest driver allocation, as the
// runtime tells it (runtime.Callers + runtime.CallersFrames): the
// reference the profile's stack of the same call is checked against.
type stackDriver struct {
	driver.Driver
	last []string
}

func (d *stackDriver) MallocAsync(n int64, s driver.Stream) (driver.DevicePtr, error) {
	var pcs [64]uintptr
	d.last = callerFrames(pcs[:runtime.Callers(1, pcs[:])])
	return d.Driver.MallocAsync(n, s)
}

const allocPkg = "github.com/capalloc/capalloc/alloc."

// callerFrames expands a stack from runtime.Callers into "function line"
// strings, from the first frame after package alloc's own (the engine's
// call site) outwards. It fails the run when the wrappers above were not
// inlined (go test -gcflags=-l), since the stacks would then prove nothing.
func callerFrames(pcs []uintptr) []string {
	var out []string
	it := runtime.CallersFrames(pcs)
	for more := true; more; {
		var f runtime.Frame
		f, more = it.Next()
		if strings.HasPrefix(f.Function, allocPkg) {
			out = out[:0] // the allocator's, and the driver's below it
			continue
		}
		if strings.HasSuffix(f.Function, ".inlinedAlloc") && f.Func != nil {
			panic("inlinedAlloc was not inlined: run without -gcflags=-l")
		}
		out = append(out, fmt.Sprintf("%s %d", f.Function, f.Line))
	}
	return out
}

// untilRunner cuts a stack after testing.tRunner.
func untilRunner(stk []string) []string {
	for i, f := range stk {
		if strings.HasPrefix(f, "testing.tRunner ") {
			return stk[:i+1]
		}
	}
	return stk
}

// profileStack flattens a sample's locations into "function line"
// strings, innermost first, as pprof -traces prints them.
func profileStack(t *testing.T, a *alloc.Allocator) []string {
	p := parseProfile(t, a.WriteProfile)
	require.Len(t, p.Sample, 1)
	var out []string
	for _, l := range p.Sample[0].Location {
		for _, ln := range l.Line {
			out = append(out, fmt.Sprintf("%s %d", ln.Function.Name, ln.Line))
		}
	}
	return out
}

// A profile's stack keeps the callers of inlined functions (issue 31):
// for an allocation through inlined wrappers at one and two depths, and
// from an inlined closure, it is the stack runtime.Callers and
// runtime.CallersFrames give on the same call (in the driver, under the
// allocator's frames), frame for frame and line for line.
func TestProfileKeepsInlinedCallers(t *testing.T) {
	recordEvery(t, 1)
	for _, c := range []struct {
		name  string
		alloc func(a *alloc.Allocator) (alloc.Buffer, error)
		want  []string // functions the stack must name, innermost first
	}{
		{"one-depth", func(a *alloc.Allocator) (alloc.Buffer, error) { return inlinedAlloc(a, 1<<20) },
			[]string{"inlinedAlloc", "TestProfileKeepsInlinedCallers.func"}},
		{"two-depths", func(a *alloc.Allocator) (alloc.Buffer, error) { return inlinedTwice(a, 1<<20) },
			[]string{"inlinedAlloc", "inlinedTwice", "TestProfileKeepsInlinedCallers.func"}},
		{"closure", func(a *alloc.Allocator) (b alloc.Buffer, err error) {
			func() { b, err = inlinedTwice(a, 1<<20) }()
			return b, err
		}, []string{"inlinedAlloc", "inlinedTwice", "TestProfileKeepsInlinedCallers.func", "TestProfileKeepsInlinedCallers.func"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cpuDrv := newCPU(t, 1<<30)
			d := &stackDriver{Driver: cpuDrv}
			a, err := alloc.New(d, alloc.Options{Name: "inlined-" + c.name})
			require.NoError(t, err)
			defer a.Close()

			b, err := c.alloc(a) // a fresh allocator: the pool asks the driver
			require.NoError(t, err)
			defer a.Free(b)
			require.NotEmpty(t, d.last, "the driver was not called")
			// Compared up to the test's runner: below it the frame-pointer
			// walk also sees the go statement's wrapper, which
			// runtime.Callers elides.
			got := untilRunner(profileStack(t, a))
			require.Equal(t, untilRunner(d.last), got)
			for i, fn := range c.want {
				require.Contains(t, got[i], testPkg+fn, "frame %d of %q", i, got)
			}
		})
	}
}
