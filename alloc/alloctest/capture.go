package alloctest

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// HeldHostBytes is the size of the pinned buffer CaptureHolding's graph
// reads from.
const HeldHostBytes = 4 << 10

// CaptureHolding captures on a a graph in the two states a view tells
// apart from live memory: it uploads HeldHostBytes into held from a
// pinned buffer and then frees held (memory held for the graph), and it
// allocates owned bytes (graph-owned memory). held must be at least
// HeldHostBytes long. The graph and its pinned buffer stay open until
// the test ends; a failure ends the test at once.
func CaptureHolding(tb testing.TB, a *alloc.Allocator, held alloc.Buffer, owned int64) *alloc.Graph {
	tb.Helper()
	h, err := a.HostAlloc(HeldHostBytes)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := a.WithCapture(alloc.CaptureOptions{}, func() error {
		if err := a.UploadHost(held, 0, h, 0, HeldHostBytes); err != nil {
			return err
		}
		if err := a.Free(held); err != nil {
			return err
		}
		_, err := a.Alloc(owned)
		return err
	})
	if err != nil {
		_ = h.Close()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := g.Close(); err != nil {
			tb.Error(err)
		}
		if err := h.Close(); err != nil {
			tb.Error(err)
		}
	})
	return g
}
