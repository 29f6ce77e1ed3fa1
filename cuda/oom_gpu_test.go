package cuda

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// On a real GPU: memory the allocator's pool cached (and the CUDA pool
// keeps, its release threshold being everything) must not make a
// synchronous allocation fail. AllocSync gives the cache back, synchronizes
// and trims the pool (cudaMemPoolTrimTo), then retries. Skipped, with the
// reason, where no CUDA device opens.
func TestGPUAllocSyncUsesCachedPoolMemory(t *testing.T) {
	d, err := New(Options{})
	if err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	defer d.Close()
	a, err := alloc.New(d, alloc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	}()
	const chunk = 1 << 30
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
	t.Logf("filled the device with %d GiB from the pool (device %d GiB)", len(bs), total>>30)
	if int64(len(bs)) < total/chunk/2 {
		t.Fatalf("only %d GiB could be allocated of %d GiB", len(bs), total>>30)
	}
	for _, b := range bs {
		if err := a.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	big := int64(max(len(bs)/2, 1)) * chunk // half, and at least a chunk: a 1 GiB device (the fake) has one
	b, err := a.AllocSync(big)
	if err != nil {
		t.Fatalf("AllocSync(%d GiB) with the device's memory cached in the pool: %v\n%s", big>>30, err, a.Stats())
	}
	if err := a.Free(b); err != nil {
		t.Fatal(err)
	}
}
