package alloc_test

import (
	"testing"

	"github.com/capalloc/capalloc/alloc/alloctest"
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/cpu"
)

// A 4 MiB HostAlloc+Close pair from the host cache against a fresh pin
// (host_cache=false), on cpu; cuda's BenchmarkFakeHostAlloc4MiB is the
// same over the fake runtime (BENCHMARKS.md):
//
//	go test ./alloc -run '^$' -bench 'HostAlloc4MiB' -count 10
func BenchmarkHostAlloc4MiB(b *testing.B) {
	alloctest.BenchHostAllocPairs(b, func(*testing.B) (driver.Driver, error) { return cpu.New(cpu.Options{}) }, 4<<20)
}
