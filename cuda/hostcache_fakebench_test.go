package cuda

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
)

// alloc's BenchmarkHostAlloc4MiB over the fake runtime: a 4 MiB
// HostAlloc+Close pair from the host cache against a fresh pin
// (cudaHostAlloc and cudaFreeHost each time):
//
//	go test ./cuda -run '^$' -bench 'FakeHostAlloc4MiB' -count 10
func BenchmarkFakeHostAlloc4MiB(b *testing.B) {
	fake.Lib(b)
	alloctest.BenchHostAllocPairs(b, func(*testing.B) (driver.Driver, error) { return New(Options{}) }, 4<<20)
}
