package alloctest

import (
	"errors"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// HostCacheCases are the host cache benchmark's two runs: the cache on,
// and off (a fresh pin each pair).
var HostCacheCases = []struct {
	Name string
	Opts alloc.Options
}{{"cached", alloc.Options{}}, {"pin", alloc.Options{NoHostCache: true}}}

// HostAllocPairs opens an allocator on drv with opts, calls start (a
// benchmark's ResetTimer), makes n HostAlloc+Close pairs of size bytes,
// touching each buffer as an engine staging into it would, and closes
// the allocator: the host cache's benchmark, shared by the backends'.
func HostAllocPairs(drv driver.Driver, opts alloc.Options, size int64, n int, start func()) (err error) {
	a, err := alloc.New(drv, opts)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	start()
	for range n {
		h, err := a.HostAlloc(size)
		if err != nil {
			return err
		}
		h.Bytes()[0] = 1
		if err := h.Close(); err != nil {
			return err
		}
	}
	return nil
}
