package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
)

// alloc's BenchmarkHostAlloc4MiB over the fake runtime: a 4 MiB
// HostAlloc+Close pair from the host cache against a fresh pin
// (cudaHostAlloc and cudaFreeHost each time):
//
//	go test ./cuda -run '^$' -bench 'FakeHostAlloc4MiB' -count 10
func BenchmarkFakeHostAlloc4MiB(b *testing.B) {
	fake.Lib(b)
	for _, tc := range []struct {
		name string
		opts alloc.Options
	}{{"cached", alloc.Options{}}, {"pin", alloc.Options{NoHostCache: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			d, err := New(Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			a, err := alloc.New(d, tc.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			b.SetBytes(4 << 20)
			b.ResetTimer()
			if err := alloctest.HostAllocPairs(a, 4<<20, b.N); err != nil {
				b.Fatal(err)
			}
		})
	}
}
