package alloc_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// newCPU is a cpu driver of limit bytes, closed without error when the
// test ends.
func newCPU(t testing.TB, limit int64) *cpu.Driver {
	t.Helper()
	d, err := cpu.New(cpu.Options{MemoryLimit: limit})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

// newCPUAllocator is an allocator on a cpu device of limit bytes; the
// device is closed when the test ends, the allocator by the test.
func newCPUAllocator(t *testing.T, limit int64) (*cpu.Driver, *alloc.Allocator) {
	t.Helper()
	d := newCPU(t, limit)
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	return d, a
}

// cpuAllocatorWith is an allocator with opts on a cpu driver of limit
// bytes. Both are closed when the test ends, without error (the allocator
// may have been closed by the test: ErrClosed then).
func cpuAllocatorWith(t *testing.T, limit int64, opts alloc.Options) *alloc.Allocator {
	t.Helper()
	return alloctest.New(t, newCPU(t, limit), opts)
}

// cacheFreed allocates a buffer of each size, all live at once, then
// frees them: the pool caches them, as an engine's warm-up step leaves it.
func cacheFreed(t *testing.T, a *alloc.Allocator, sizes ...int64) {
	t.Helper()
	var bufs []alloc.Buffer
	for _, n := range sizes {
		b, err := a.Alloc(n)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		require.NoError(t, a.Free(b))
	}
}

// overlap says whether [p, p+pn) and [q, q+qn) share a byte.
func overlap(p driver.DevicePtr, pn int64, q driver.DevicePtr, qn int64) bool {
	return p < q+driver.DevicePtr(qn) && q < p+driver.DevicePtr(pn)
}

// allocFreeWorkers starts workers goroutines on a, worker w allocating
// and freeing size(w, i) bytes for i in [0, n); a failure is the test's
// error and ends that worker. The returned wait waits for them all.
func allocFreeWorkers(t testing.TB, a *alloc.Allocator, workers, n int, size func(w, i int) int64) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				b, err := a.Alloc(size(w, i))
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Free(b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	return wg.Wait
}
