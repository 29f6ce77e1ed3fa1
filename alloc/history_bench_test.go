package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/cpu"
)

// The 64 KiB Alloc+Free pair with the allocation history off and on
// (BenchmarkAllocFree is the pair's figure before the history existed):
// on, each call records an event with its stack.
func BenchmarkAllocFreeHistory(b *testing.B) {
	for _, c := range []struct {
		name    string
		history int
	}{{"history=off", 0}, {"history=on", 1 << 16}} {
		b.Run(c.name, func(b *testing.B) {
			d, err := cpu.New(cpu.Options{MemoryLimit: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			a, err := alloc.New(d, alloc.Options{History: c.history})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			warm, _ := a.Alloc(64 << 10)
			a.Free(warm)
			b.ReportAllocs()
			b.ResetTimer()
			c0 := processCPU()
			for i := 0; i < b.N; i++ {
				buf, err := a.Alloc(64 << 10)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, c0, 1, "")
		})
	}
}
