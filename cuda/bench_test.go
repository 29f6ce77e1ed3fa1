package cuda

// GPU benchmarks: they run where a CUDA device opens and skip with the
// reason elsewhere, so a session with a GPU runs
//
//	go test ./cuda -run '^$' -bench . -benchmem
//
// (CAPALLOC_CUDA_LIB unset: the fake runtime must not be benchmarked).

import (
	"fmt"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

func gpuAllocator(b *testing.B) *alloc.Allocator {
	b.Helper()
	return alloctest.New(b, gpu(b), alloc.Options{})
}

func BenchmarkGPUAllocFree(b *testing.B) {
	for _, s := range []struct {
		name string
		n    int64
	}{{"size=256B", 256}, {"size=64KiB", 64 << 10}, {"size=4MiB", 4 << 20}, {"size=256MiB", 256 << 20}} {
		b.Run(s.name, func(b *testing.B) {
			a := gpuAllocator(b)
			warm, err := a.Alloc(s.n)
			if err != nil {
				b.Fatal(err)
			}
			a.Free(warm)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf, err := a.Alloc(s.n)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGPUTransfer64MiB(b *testing.B) {
	const n = 64 << 20
	for _, dir := range []string{"upload", "download"} {
		b.Run("dir="+dir, func(b *testing.B) {
			a := gpuAllocator(b)
			h, err := a.HostAlloc(n)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			buf, err := a.Alloc(n)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Free(buf)
			b.SetBytes(n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if dir == "upload" {
					err = a.UploadHost(buf, 0, h, 0, n)
				} else {
					err = a.DownloadHost(h, 0, buf, 0, n)
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGPUReplay compares 1,000 small device operations issued eagerly
// with the same operations replayed as one captured graph.
func BenchmarkGPUReplay(b *testing.B) {
	const ops = 1000
	for _, mode := range []string{"eager", "graph"} {
		b.Run(fmt.Sprintf("ops=%d/impl=%s", ops, mode), func(b *testing.B) {
			a := gpuAllocator(b)
			x, err := a.Alloc(4096)
			if err != nil {
				b.Fatal(err)
			}
			y, err := a.Alloc(4096)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Free(x)
			defer a.Free(y)
			work := func() error {
				for i := 0; i < ops/2; i++ {
					if err := a.Memset(x, 0, byte(i), 4096); err != nil {
						return err
					}
					if err := a.Copy(y, 0, x, 0, 4096); err != nil {
						return err
					}
				}
				return nil
			}
			run := work
			if mode == "graph" {
				g, err := a.WithCapture(alloc.CaptureOptions{Mode: alloc.Global}, work)
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				run = g.Launch
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := run(); err != nil {
					b.Fatal(err)
				}
				if err := a.Synchronize(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
