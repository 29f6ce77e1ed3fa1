package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/alloctest"
)

// alloc's BenchmarkHostAlloc4MiB over the fake runtime: a 4 MiB
// HostAlloc+Close pair from the host cache against a fresh pin
// (cudaHostAlloc and cudaFreeHost each time):
//
//	go test ./cuda -run '^$' -bench 'FakeHostAlloc4MiB' -count 10
func BenchmarkFakeHostAlloc4MiB(b *testing.B) {
	fake.Lib(b)
	for _, tc := range alloctest.HostCacheCases {
		b.Run(tc.Name, func(b *testing.B) {
			d, err := New(Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			b.SetBytes(4 << 20)
			if err := alloctest.HostAllocPairs(d, tc.Opts, 4<<20, b.N, b.ResetTimer); err != nil {
				b.Fatal(err)
			}
		})
	}
}
