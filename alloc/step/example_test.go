package step_test

import (
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/step"
	"github.com/capalloc/capalloc/cpu"
)

// A step whose producer cannot be captured (a pageable upload from a Go
// slice) runs it in Pre, eagerly at every step; the rest is warmed up,
// captured once and replayed.
func Example() {
	drv, _ := cpu.New(cpu.Options{})
	defer drv.Close()
	a, _ := alloc.New(drv, alloc.Options{})
	defer a.Close()

	x, _ := a.Alloc(4)
	out, _ := a.HostAlloc(4) // pinned: every replay writes it
	tokens := []byte{0, 0, 0, 0}

	st, _ := step.New(a, step.Config{
		WarmUp:   1,
		Pre:      func() error { return a.Upload(x, 0, tokens) }, // pageable: never in a capture
		Captured: func() error { return a.DownloadHost(out, 0, x, 0, 4) },
		Post:     a.Synchronize,
	})
	for i := range 4 {
		tokens[0] = byte(10 + i)
		if err := st.Run(); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(out.Bytes()[0], st.Stats().Mode)
	}
	_ = st.Close()
	_ = out.Close()
	_ = a.Free(x)
	// Output:
	// 10 warm-up
	// 11 captured
	// 12 captured
	// 13 captured
}
