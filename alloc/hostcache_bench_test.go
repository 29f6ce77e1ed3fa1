package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cpu"
)

// A 4 MiB HostAlloc+Close pair from the host cache against a fresh pin
// (host_cache=false), on cpu; cuda's BenchmarkFakeHostAlloc4MiB is the
// same over the fake runtime (BENCHMARKS.md):
//
//	go test ./alloc -run '^$' -bench 'HostAlloc4MiB' -count 10
func BenchmarkHostAlloc4MiB(b *testing.B) {
	for _, tc := range alloctest.HostCacheCases {
		b.Run(tc.Name, func(b *testing.B) {
			d, err := cpu.New(cpu.Options{})
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
