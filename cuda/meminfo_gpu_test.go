package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// On a real GPU: cudaMemGetInfo (driver.MemInfoer) answers sanely, and
// asking it during a Global-mode capture of the allocator's stream (an
// out-of-memory error and a snapshot do) leaves the capture valid: it is
// a query, not an unsafe call. An out-of-memory error says the device's
// free memory. Skipped, with the reason, where no CUDA device opens.
func TestGPUMemInfoDuringCapture(t *testing.T) {
	d := gpu(t)
	free, total, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cudaMemGetInfo: free %d B of %d B; DeviceInfo.TotalMemory %d B", free, total, d.Info().TotalMemory)
	if total <= 0 || free <= 0 || free > total {
		t.Fatalf("free %d B of %d B", free, total)
	}
	a := alloctest.New(t, d, alloc.Options{})
	if err := a.BeginCapture(alloc.Global); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.MemInfo(); err != nil {
		t.Errorf("MemInfo during a Global capture: %v", err)
	}
	if s, err := a.Snapshot(); err != nil || s.DeviceFree == nil {
		t.Errorf("Snapshot during a Global capture: %v, free %v", err, s.DeviceFree)
	}
	b, err := a.Alloc(1 << 20)
	if err != nil {
		t.Errorf("Alloc in the capture after MemInfo: %v", err)
	}
	g, err := a.EndCapture()
	if err != nil {
		t.Fatalf("the capture did not survive MemInfo: %v", err)
	}
	if err := g.Launch(); err != nil {
		t.Error(err)
	}
	if err := a.Synchronize(); err != nil {
		t.Error(err)
	}
	_ = b
	if err := g.Close(); err != nil {
		t.Error(err)
	}
	_, err = a.Alloc(a.Info().TotalMemory + 1)
	if !errors.Is(err, alloc.ErrOutOfMemory) || !strings.Contains(err.Error(), " free; this allocator") {
		t.Errorf("larger than the device: %v", err)
	}
	t.Log(err)
}
