package alloc_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/capalloc/capalloc/alloc"
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
			a := cpuAllocatorWith(b, 1<<30, alloc.Options{History: c.history})
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

// An out-of-memory error with HistoryFile set, the history holding
// 200,000 events: the whole error is made under the allocator's lock, so
// its time is what the engine's other calls on the locked path may wait.
// The file is written apart from it; the benchmark waits for the last
// write at its end.
func BenchmarkOutOfMemoryWithHistoryFile(b *testing.B) {
	a := cpuAllocatorWith(b, 1<<30, alloc.Options{History: 200_000, HistoryFile: filepath.Join(b.TempDir(), "history.json")})
	for range 100_000 {
		buf, err := a.Alloc(4 << 10)
		if err != nil {
			b.Fatal(err)
		}
		a.Free(buf)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := a.Alloc(1 << 40); !errors.Is(err, alloc.ErrOutOfMemory) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := alloc.FlushHistoryFiles(); err != nil {
		b.Fatal(err)
	}
}
