package hip

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capalloc/capalloc/alloc"
)

// hipMemGetInfo failing at open is not fatal: the total comes from
// hipDeviceTotalMem and a warning says so.
func TestFakeMemGetInfoFailureFallsBack(t *testing.T) {
	t.Setenv("FAKE_HIP_FAIL", "hipMemGetInfo:999")
	t.Setenv("FAKE_HIP_MEM", "3221225472")
	d, _ := openFake(t, Options{})
	require.Equal(t, int64(3<<30), d.Info().TotalMemory)
	w := strings.Join(d.Warnings(), "\n")
	require.Contains(t, w, "total memory from hipDeviceTotalMem")
	require.Contains(t, w, "hipMemGetInfo: unknown (hipErrorUnknown, 999)")
}

// On a unified-memory device an under-reporting hipMemGetInfo is
// overridden by hipDeviceTotalMem; on a discrete one hipMemGetInfo stands.
func TestFakeMemGetInfoUnderReport(t *testing.T) {
	t.Setenv("FAKE_HIP_MEMINFO_TOTAL", "268435456")
	t.Setenv("FAKE_HIP_INTEGRATED", "1")
	d, _ := openFake(t, Options{})
	require.True(t, d.Info().UnifiedMemory)
	require.Equal(t, int64(1<<30), d.Info().TotalMemory)
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "under-reports unified memory (268435456 B)")

	t.Setenv("FAKE_HIP_INTEGRATED", "0")
	d, _ = openFake(t, Options{})
	require.Equal(t, int64(256<<20), d.Info().TotalMemory)
	require.NotContains(t, strings.Join(d.Warnings(), "\n"), "total memory")
}

// graphMemory captures an allocation the graph also frees, then closes the
// graph: its memory stays cached for graphs until hipDeviceGraphMemTrim.
func graphMemory(t *testing.T, a *alloc.Allocator, n int64) {
	t.Helper()
	require.NoError(t, a.BeginCapture(alloc.Global))
	b, err := a.Alloc(n)
	require.NoError(t, err)
	require.NoError(t, a.Free(b))
	g, err := a.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

func TestFakeTrimTrimsGraphMemory(t *testing.T) {
	d, log := openFake(t, Options{})
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	graphMemory(t, a, 1<<20)
	log.Lines()
	require.NoError(t, a.Trim())
	require.Len(t, find(log.Lines(), "hipDeviceGraphMemTrim device=0 cached=1048576"), 1)

	// Device-wide: not during another allocator's Global capture. The pool
	// cache is released, the graph trim skipped, the capture left valid.
	b, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.BeginCapture(alloc.Global))
	require.NoError(t, a.Trim())
	require.Empty(t, find(log.Lines(), "hipDeviceGraphMemTrim"))
	g, err := b.EndCapture()
	require.NoError(t, err)
	require.NoError(t, g.Close())
}

// Under memory pressure an allocation that ran out of memory is retried
// after the graph memory of closed graphs is trimmed.
func TestFakeOutOfMemoryTrimsGraphMemory(t *testing.T) {
	t.Setenv("FAKE_HIP_MEM", "4194304")
	d, log := openFake(t, Options{})
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	graphMemory(t, a, 3<<20)
	log.Lines()
	b, err := a.Alloc(2 << 20)
	require.NoError(t, err, "the retry after the trim succeeds")
	lines := log.Lines()
	require.Len(t, find(lines, "hipMallocFromPoolAsync n=2097152"), 2, "failed once, then retried: %v", lines)
	require.Len(t, find(lines, "hipDeviceGraphMemTrim"), 1, "%v", lines)
	require.NoError(t, a.Free(b))
}

// Without the optional symbol the library still opens, a warning says
// graph memory is not trimmed, Trim does nothing more, and the allocation
// above runs out of memory.
func TestFakeGraphMemTrimAbsent(t *testing.T) {
	t.Setenv("FAKE_HIP_MEM", "4194304")
	path := fakeLibWith(t, "-DFAKE_NO_GRAPH_MEM_TRIM")
	log := openFakeLog(t, path)
	d, err := New(Options{})
	require.NoError(t, err)
	defer d.Close()
	require.Contains(t, strings.Join(d.Warnings(), "\n"), "lacks hipDeviceGraphMemTrim")
	require.NoError(t, d.TrimGraphMemory(), "nothing to call")
	a, err := alloc.New(d, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	graphMemory(t, a, 3<<20)
	require.NoError(t, a.Trim())
	_, err = a.Alloc(2 << 20)
	require.ErrorIs(t, err, alloc.ErrOutOfMemory)
	require.Empty(t, find(log.Lines(), "hipDeviceGraphMemTrim"))
}

// TrimPool is hipMemPoolTrimTo(pool, 0) on the driver's pool, on the
// device thread.
func TestFakeTrimPool(t *testing.T) {
	d, log := openFake(t, Options{Device: 0})
	log.Lines()
	require.NoError(t, d.TrimPool())
	lines := log.Lines()
	require.Len(t, find(lines, "hipMemPoolTrimTo", "keep=0"), 1, "%v", lines)
	require.NoError(t, d.Close())
	require.ErrorIs(t, d.TrimPool(), alloc.ErrClosed)
}
