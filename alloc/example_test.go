package alloc_test

import (
	"errors"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// The pattern of the README: reserve before capturing, capture once, then
// replay with fresh inputs written into the pinned buffer.
func Example() {
	drv, _ := cpu.New(cpu.Options{})
	defer drv.Close()
	a, _ := alloc.New(drv, alloc.Options{})
	defer a.Close()

	const n = 4
	in, _ := a.HostAlloc(n)  // pinned: every replay reads its current bytes
	out, _ := a.HostAlloc(n) // pinned: every replay writes it
	x, _ := a.Alloc(n)       // allocated before the capture

	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		if err := a.UploadHost(x, 0, in, 0, n); err != nil {
			return err
		}
		return a.DownloadHost(out, 0, x, 0, n)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for step := range 2 {
		copy(in.Bytes(), []byte{byte(step), 1, 2, 3}) // fresh data, same graph
		_ = g.Launch()
		_ = a.Synchronize()
		fmt.Println(out.Bytes())
	}
	fmt.Println("allocations in the capture:", a.CaptureAllocCount())

	_ = g.Close()
	_ = a.Free(x)
	_ = in.Close()
	_ = out.Close()
	// Output:
	// [0 1 2 3]
	// [1 1 2 3]
	// allocations in the capture: 0
}

// An operation a capture forbids is refused before any driver call, with a
// typed error, and the capture stays valid.
func ExampleAllocator_Synchronize_refusedDuringCapture() {
	drv, _ := cpu.New(cpu.Options{})
	defer drv.Close()
	a, _ := alloc.New(drv, alloc.Options{})
	defer a.Close()

	_ = a.BeginCapture(alloc.Global)
	err := a.Synchronize()
	fmt.Println(errors.Is(err, alloc.ErrSyncDuringCapture))
	st, _ := a.CaptureStatus()
	fmt.Println(st)
	g, _ := a.EndCapture()
	_ = g.Close()
	// Output:
	// true
	// active
}
