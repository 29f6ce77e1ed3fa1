package conformance

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// BenchmarkHostAlloc4MiB is alloc's host cache benchmark on the selected
// backend (cpu when none is): a 4 MiB HostAlloc+Close pair from the cache
// against a fresh pin (host_cache=false: the runtime's pin and unpin each
// time). The GPU kit's host_memory step runs it on the device:
//
//	go test ./conformance -backend=cuda -run '^$' -bench 'HostAlloc4MiB' -count 3
func BenchmarkHostAlloc4MiB(b *testing.B) {
	open := selectedFactory(b)
	alloctest.BenchHostAllocPairs(b, func(b *testing.B) (driver.Driver, error) { return open(b), nil }, 4<<20)
}
