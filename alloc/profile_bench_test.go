package alloc_test

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/internal/registry"
)

// The cost of profiling on the 64 KiB Alloc+Free pair (BenchmarkAllocFree's
// capalloc row): off (the default), sampling at the default rate, and
// recording every allocation (issue 22: off unchanged with 0 allocations,
// default <= 1.3x off, every <= 10x off).
func BenchmarkAllocFreeProfile(b *testing.B) {
	for _, r := range []struct {
		name string
		rate int
	}{{"off", 0}, {"default", 512 << 10}, {"every", 1}} {
		b.Run("size=64KiB/rate="+r.name, func(b *testing.B) {
			prev, _ := alloc.SetProfileRate(r.rate)
			defer alloc.SetProfileRate(prev)
			benchPairs(b, newBenchAllocator(b), 64<<10)
		})
	}
}

// liveBlocks is the size of the views' benchmark: 100,000 live buffers.
const liveBlocks = 100_000

// fill allocates liveBlocks buffers of 512 B to 4 KiB from four call
// sites, every one recorded, and frees every tenth (holes).
func fill(b *testing.B) *alloc.Allocator {
	prev, _ := alloc.SetProfileRate(1)
	defer alloc.SetProfileRate(prev)
	a := newBenchAllocator(b)
	sites := []func(*alloc.Allocator, int64) (alloc.Buffer, error){loadWeights, kvCache, stepTemp, scratch}
	var bufs []alloc.Buffer
	for i := range liveBlocks + liveBlocks/10 {
		buf, err := sites[i%4](a, int64(512<<(i%4)))
		if err != nil {
			b.Fatal(err)
		}
		bufs = append(bufs, buf)
	}
	for i := 0; i < len(bufs); i += 11 {
		a.Free(bufs[i])
	}
	b.Cleanup(func() {
		for i, buf := range bufs {
			if i%11 != 0 {
				a.Free(buf)
			}
		}
	})
	return a
}

//go:noinline
func scratch(a *alloc.Allocator, n int64) (alloc.Buffer, error) { return a.Alloc(n) }

// The snapshot and the profile of 100,000 live blocks (issue 22: each at
// most 100 ms).
func BenchmarkViews100k(b *testing.B) {
	a := fill(b)
	if s, _ := a.Stats(), 0; s.LiveBuffers < liveBlocks {
		b.Fatalf("%d live buffers", s.LiveBuffers)
	}
	b.Run("view=Snapshot", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("view=SnapshotJSON", func(b *testing.B) {
		for b.Loop() {
			s, err := a.Snapshot()
			if err != nil {
				b.Fatal(err)
			}
			if err := json.NewEncoder(io.Discard).Encode(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("view=Usage", func(b *testing.B) {
		for b.Loop() {
			if _, err := registry.Usage(a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("view=WriteProfile", func(b *testing.B) {
		for b.Loop() {
			if err := a.WriteProfile(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
}
