package alloc_test

import (
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
