package conformance

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/alloctest"
)

// BenchmarkHostAlloc4MiB is alloc's host cache benchmark on the selected
// backend (cpu when none is): a 4 MiB HostAlloc+Close pair from the cache
// against a fresh pin (host_cache=false: the runtime's pin and unpin each
// time). The GPU kit's host_memory step runs it on the device:
//
//	go test ./conformance -backend=cuda -run '^$' -bench 'HostAlloc4MiB' -count 3
func BenchmarkHostAlloc4MiB(b *testing.B) {
	for _, tc := range alloctest.HostCacheCases {
		b.Run(tc.Name, func(b *testing.B) {
			d := newDecodeDriver(b)
			b.SetBytes(4 << 20)
			if err := alloctest.HostAllocPairs(d, tc.Opts, 4<<20, b.N, b.ResetTimer); err != nil {
				b.Fatal(err)
			}
		})
	}
}
