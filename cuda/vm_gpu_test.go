package cuda

import (
	"bytes"
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// On a real GPU: a reservation with two chunks mapped by separate calls
// reads and writes as one range. A memset straddles the chunk boundary, a
// pattern is uploaded across it and copied device to device within the
// reservation, and the bytes come back. Skipped, with the reason, where no
// CUDA device opens.
func TestGPUVirtualMemoryAcrossChunks(t *testing.T) {
	d := gpu(t)
	g := d.MapGranularity()
	if g == 0 {
		_, err := d.ReserveAddress(2 << 20)
		t.Fatalf("the device offers no virtual memory: %v", err)
	}
	t.Logf("granularity %d B", g)
	base, err := d.ReserveAddress(4 * g)
	must(t, err)
	must(t, d.MapMemory(base, g))
	must(t, d.MapMemory(base+driver.DevicePtr(g), g))
	s, err := d.CreateStream()
	must(t, err)
	defer d.DestroyStream(s)

	const n = 1 << 20
	at := base + driver.DevicePtr(g-n/2)
	must(t, d.MemsetAsync(at, 0xA5, n, s))
	out := make([]byte, n)
	must(t, d.CopyDtoH(out, at, s))
	if !bytes.Equal(out, bytes.Repeat([]byte{0xA5}, n)) {
		t.Fatal("memset across the chunk boundary: wrong bytes")
	}
	in := make([]byte, n)
	for i := range in {
		in[i] = byte(i*13 + 1)
	}
	must(t, d.CopyHtoD(at, in, s))
	must(t, d.CopyDtoDAsync(base, at, n, s)) // from the straddling range to the first chunk's start
	for _, p := range []driver.DevicePtr{at, base} {
		clear(out)
		must(t, d.CopyDtoH(out, p, s))
		if !bytes.Equal(out, in) {
			t.Fatalf("copies across the chunk boundary: wrong bytes at %#x", uint64(p))
		}
	}
	must(t, d.StreamSynchronize(s))
	must(t, d.UnmapMemory(base+driver.DevicePtr(g), g))
	must(t, d.UnmapMemory(base, g))
	must(t, d.ReleaseAddress(base, 4*g))
}

// BenchmarkGPUVirtualMemoryMapUnmap is what expandable segments pay per
// chunk on a real GPU: one map (cuMemCreate, cuMemMap, cuMemSetAccess)
// and one unmap (cuMemUnmap, cuMemRelease) of one granularity-sized
// chunk in a reservation. With the traces' maps per run (BENCHMARKS.md,
// "Expandable segments") it prices the policy's slack. Skipped where no
// CUDA device opens.
func BenchmarkGPUVirtualMemoryMapUnmap(b *testing.B) {
	d := gpu(b)
	g := d.MapGranularity()
	if g == 0 {
		b.Fatal("the device offers no virtual memory")
	}
	base, err := d.ReserveAddress(g)
	if err != nil {
		b.Fatal(err)
	}
	defer d.ReleaseAddress(base, g)
	b.ReportMetric(float64(g), "chunk-B")
	for b.Loop() {
		if err := d.MapMemory(base, g); err != nil {
			b.Fatal(err)
		}
		if err := d.UnmapMemory(base, g); err != nil {
			b.Fatal(err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
