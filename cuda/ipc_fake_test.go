package cuda

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/internal/gpurt/gpurttest"
)

// The IPC and pool-sharing paths both drivers share are tested once, for
// both, in internal/gpurt/memory_fake_test.go and
// internal/gpurt/shared_fake_test.go;
// here, what only CUDA does.

// An exportable pool cannot serve graph allocations: on an H100 (CUDA
// 13.0) cudaMallocFromPoolAsync in a capture from it returned 801, and
// the whole capture half of the conformance suite failed with ipc=true.
// The driver makes a second pool, not exportable, for captures; the fake
// refuses as the H100 did, so this fails without it.
func TestFakeIPCPoolCaptures(t *testing.T) {
	d, log := openFake(t, Options{IPC: true})
	lines := log.Lines()
	require.Len(t, gpurttest.Find(lines, "cudaMemPoolCreate allocType=1 handleTypes=1 locationType=1"), 1, "the exportable pool")
	require.Len(t, gpurttest.Find(lines, "cudaMemPoolCreate allocType=1 handleTypes=0 locationType=1"), 1, "the capture pool")
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	eager, err := a.Alloc(4096)
	require.NoError(t, err)
	g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, func() error {
		b, err := a.Alloc(4096)
		if err != nil {
			return err
		}
		return a.Memset(b, 0, 1, 4096)
	})
	require.NoError(t, err, "a capture allocates from the pool that is not exportable")
	require.NoError(t, g.Launch())
	require.NoError(t, a.Synchronize())
	require.NoError(t, g.Close())
	require.NoError(t, a.Free(eager))
}
