package alloc_test

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// examplePrefill stands for an engine's allocation site; the profile's stacks
// start at its call to Alloc.
//
//go:noinline
func examplePrefill(a *alloc.Allocator) (alloc.Buffer, error) { return a.Alloc(3 << 20) }

// Device memory profiling: SetProfileRate turns sampling on for every
// allocator of the process (1: every allocation), and WriteProfile writes
// what is in use, by call stack, as a pprof heap profile that
// `go tool pprof` opens (alloc/allocview serves it over HTTP too).
func ExampleSetProfileRate() {
	prev, _ := alloc.SetProfileRate(1)
	defer alloc.SetProfileRate(prev)

	drv, _ := cpu.New(cpu.Options{})
	defer drv.Close()
	a, _ := alloc.New(drv, alloc.Options{Name: "example-profile"})
	defer a.Close()
	w, _ := examplePrefill(a)
	defer a.Free(w)

	var buf bytes.Buffer
	if err := a.WriteProfile(&buf); err != nil {
		fmt.Println(err)
		return
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, st := range p.SampleType {
		if st.Type != "inuse_space" {
			continue
		}
		for _, s := range p.Sample {
			fn := s.Location[0].Line[0].Function.Name // the stack's leaf: the engine's call to Alloc
			fmt.Printf("%s %d %s owner=%s at %s\n", st.Type, s.Value[i], st.Unit, s.Label["owner"][0], fn[strings.LastIndexByte(fn, '/')+1:])
		}
	}
	// Output:
	// inuse_space 3145728 bytes owner=pool-live at alloc_test.examplePrefill
}
