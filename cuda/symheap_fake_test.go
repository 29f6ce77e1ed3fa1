package cuda

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// On an integrated device (GB10: the GPU reaches host memory) symheap
// accepts the cuda driver, but CUDA may run the host functions of
// different streams one at a time on its own thread, so two ranks in one
// process could wait on each other's barrier forever (until the timeout):
// the second rank of a group in the same process is refused with the
// reason; once the first closes, it opens.
func TestSymheapOneRankPerProcessOnCUDA(t *testing.T) {
	fake.Lib(t)
	t.Setenv("FAKE_CUDA_INTEGRATED", "1")
	g, err := symheap.NewGroup(2, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	as := make([]*alloc.Allocator, 2)
	for r := range as {
		d, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if !d.Info().UnifiedMemory {
			t.Fatal("the fake did not report an integrated device")
		}
		a, err := alloc.New(d, alloc.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as[r] = a
	}
	h0, err := g.Open(0, as[0], symheap.Options{})
	if err != nil {
		t.Fatalf("the first rank in the process: %v", err)
	}
	if _, err := g.Open(1, as[1], symheap.Options{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a second rank in the same process on cuda: got %v, want errors.ErrUnsupported", err)
	}
	if err := h0.Close(); err != nil {
		t.Fatal(err)
	}
	h1, err := g.Open(1, as[1], symheap.Options{})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if err := h1.Close(); err != nil {
		t.Fatal(err)
	}
}
