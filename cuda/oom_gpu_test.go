package cuda

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// On a real GPU: memory the allocator's pool cached (and the CUDA pool
// keeps, its release threshold being everything) must not make a
// synchronous allocation fail. AllocSync gives the cache back, synchronizes
// and trims the pool (cudaMemPoolTrimTo), then retries. Skipped, with the
// reason, where no CUDA device opens.
func TestGPUAllocSyncUsesCachedPoolMemory(t *testing.T) {
	d := gpu(t)
	allocSyncUsesCachedPool(t, d, 1<<30)
}

// The same over the fake runtime, in every go test run: its 1 GiB device
// in eighths, its pools as strict as CUDA's (they keep what is freed into
// them; a trim releases only frees a synchronize observed).
func TestFakeAllocSyncUsesCachedPoolMemory(t *testing.T) {
	d, _ := openFake(t, Options{})
	allocSyncUsesCachedPool(t, d, 1<<27)
}

// allocSyncUsesCachedPool fills d's device from the allocator's pool in
// chunks, frees them (cached by the allocator), then asks AllocSync for
// half the device.
func allocSyncUsesCachedPool(t *testing.T, d *Driver, chunk int64) {
	a := alloctest.New(t, d, alloc.Options{})
	total := a.Info().TotalMemory
	var bs []alloc.Buffer
	for i := int64(0); i <= total/chunk+1; i++ {
		b, err := a.Alloc(chunk)
		if err != nil {
			if !errors.Is(err, alloc.ErrOutOfMemory) {
				t.Fatal(err)
			}
			break
		}
		bs = append(bs, b)
	}
	t.Logf("filled the device with %d chunks of %d B from the pool (device %d B)", len(bs), chunk, total)
	if int64(len(bs)) < total/chunk/2 {
		t.Fatalf("only %d chunks of %d B could be allocated of %d B", len(bs), chunk, total)
	}
	for _, b := range bs {
		if err := a.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	big := int64(max(len(bs)/2, 1)) * chunk // half, and at least a chunk
	b, err := a.AllocSync(big)
	if err != nil {
		free, _ := memInfo(t, d)
		t.Fatalf("AllocSync(%d B) with the device's memory cached in the pool: %v\n%s\nthe runtime says %d B free", big, err, a.Stats(), free)
	}
	if err := a.Free(b); err != nil {
		t.Fatal(err)
	}
}
