package cuda

import (
	"fmt"
	"testing"
	"time"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/symheap"
)

// What the fake's kernel executor costs the tests (issue 27, item 12):
// a barrier and a 256 KiB one-shot all-reduce of goroutine ranks on the
// fake runtime, eager, each rank launching and synchronizing its own.
//
//	go test ./cuda -run '^$' -bench 'Fake(Barrier|AllReduce)' -benchtime 20x -count 5

// benchFakeHeaps opens n goroutine ranks' device heaps of size bytes.
func benchFakeHeaps(b *testing.B, n int, size int64) []*symheap.DeviceHeap {
	fake.Lib(b)
	x := symheap.NewLocalExchange(n)
	as := make([]*alloc.Allocator, n)
	for r := range as {
		d, err := New(Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		if as[r], err = alloc.New(d, alloc.Options{}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { as[r].Close() })
	}
	heaps := make([]*symheap.DeviceHeap, n)
	for r, err := range eachRank(n, func(r int) (err error) {
		heaps[r], err = symheap.OpenDevice(r, as[r], x, size, symheap.DeviceOptions{Timeout: time.Minute})
		return err
	}) {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
	b.Cleanup(func() { eachRank(n, func(r int) error { return heaps[r].Close() }) })
	return heaps
}

// benchEach runs step on every rank b.N times, then synchronizes.
func benchEach(b *testing.B, heaps []*symheap.DeviceHeap, step func(h *symheap.DeviceHeap) error) {
	b.ResetTimer()
	for r, err := range eachRank(len(heaps), func(r int) error {
		for range b.N {
			if err := step(heaps[r]); err != nil {
				return err
			}
			if err := heaps[r].Synchronize(); err != nil {
				return err
			}
		}
		return nil
	}) {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}

func BenchmarkFakeBarrier(b *testing.B) {
	for _, n := range []int{2, 3} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			heaps := benchFakeHeaps(b, n, 1<<16)
			benchEach(b, heaps, (*symheap.DeviceHeap).Barrier)
		})
	}
}

func BenchmarkFakeAllReduce256KiB(b *testing.B) {
	for _, n := range []int{2, 3} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			heaps := benchFakeHeaps(b, n, 1<<19)
			ts := make([]symheap.Tensor, n)
			for r, h := range heaps {
				var err error
				if ts[r], err = h.Alloc(256 << 10); err != nil {
					b.Fatal(err)
				}
			}
			benchEach(b, heaps, func(h *symheap.DeviceHeap) error {
				return h.AllReduceWith(ts[0], symheap.Float32, symheap.OneShot)
			})
		})
	}
}
