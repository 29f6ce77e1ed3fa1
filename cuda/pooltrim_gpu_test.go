package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/driver"
)

// memInfo is d's MemInfo (cudaMemGetInfo, device-wide), failing t on an
// error.
func memInfo(t *testing.T, d *Driver) (free, total int64) {
	t.Helper()
	free, total, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	return free, total
}

// On a real GPU, the driver layer alone: the pool keeps what is freed into
// it (the release threshold is everything) until TrimPool, after which a
// synchronous Malloc can use the memory. It logs the device's free memory
// at each stage, so a failure says which one kept the memory (issue found
// by TestGPUAllocSyncUsesCachedPoolMemory on an H200). Over the fake
// runtime it runs on the fake's 1 GiB, whose pools model the same rule.
func TestGPUPoolTrimReturnsMemory(t *testing.T) {
	d := gpu(t)
	s, err := d.CreateStream()
	if err != nil {
		t.Fatal(err)
	}
	defer d.DestroyStream(s)
	free0, total := memInfo(t, d)
	chunk := int64(1 << 30)
	if total <= 2<<30 { // the fake's device
		chunk = total / 8
	}
	var ps []driver.DevicePtr
	for range 1 << 12 {
		p, err := d.MallocAsync(chunk, s)
		if err != nil {
			break
		}
		ps = append(ps, p)
	}
	if err := d.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	full, _ := memInfo(t, d)
	for _, p := range ps {
		if err := d.FreeAsync(p, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	freed, _ := memInfo(t, d)
	if err := d.TrimPool(); err != nil {
		t.Fatal(err)
	}
	trimmed, _ := memInfo(t, d)
	t.Logf("%d chunks of %d B; free: at start %d B, full %d B, freed into the pool %d B, trimmed %d B (total %d B)",
		len(ps), chunk, free0, full, freed, trimmed, total)
	if len(ps) < 2 {
		t.Fatalf("only %d chunk(s) of %d B allocated", len(ps), chunk)
	}
	if trimmed+chunk < free0 {
		t.Errorf("TrimPool left %d B of the %d B free at start unreturned", free0-trimmed, free0)
	}
	half := int64(len(ps)/2) * chunk
	p, err := d.Malloc(half)
	if err != nil {
		t.Fatalf("Malloc(%d B) after the trim: %v", half, err)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
}
