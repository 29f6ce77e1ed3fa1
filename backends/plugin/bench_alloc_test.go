package plugin

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
)

// The allocator's hot path through a plugin against the same in process:
// a pooled Alloc+Free pair (no driver call but the capture-status checks)
// and a 256 B Memset (a status check and MemsetAsync). The memset loop
// synchronizes once at the end, inside the timing, so what was sent
// without waiting is paid for (issue 12, item 1).

func benchAllocator(b *testing.B, cfg string) *alloc.Allocator {
	b.Helper()
	a, err := alloc.New(benchDriver(b, cfg), alloc.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	return a
}

func BenchmarkAllocator(b *testing.B) {
	for _, cfg := range []string{"cpu", "plugin:cpu"} {
		b.Run("backend="+cfg+"/op=pair-256B", func(b *testing.B) {
			a := benchAllocator(b, cfg)
			warm, err := a.Alloc(256) // the pool is warm, as in an engine's steady state
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Free(warm); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf, err := a.Alloc(256)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("backend="+cfg+"/op=memset-256B", func(b *testing.B) {
			a := benchAllocator(b, cfg)
			buf, err := a.Alloc(256)
			if err != nil {
				b.Fatal(err)
			}
			if err := a.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := a.Memset(buf, 0, byte(i), 256); err != nil {
					b.Fatal(err)
				}
			}
			if err := a.Synchronize(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := a.Free(buf); err != nil {
				b.Fatal(err)
			}
		})
	}
}
