package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/cpu"
)

// A 4 MiB HostAlloc+Close pair from the host cache against a fresh pin
// (host_cache=false), on cpu; cuda's BenchmarkFakeHostAlloc4MiB is the
// same over the fake runtime (BENCHMARKS.md):
//
//	go test ./alloc -run '^$' -bench 'HostAlloc4MiB' -count 10
func BenchmarkHostAlloc4MiB(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts alloc.Options
	}{{"cached", alloc.Options{}}, {"pin", alloc.Options{NoHostCache: true}}} {
		b.Run(tc.name, func(b *testing.B) {
			d, err := cpu.New(cpu.Options{})
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
