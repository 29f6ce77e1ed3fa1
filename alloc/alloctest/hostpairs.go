package alloctest

import (
	"errors"
	"testing"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/alloc/driver"
)

// hostCacheCases are the host cache benchmark's two runs: the cache on,
// and off (a fresh pin each pair).
var hostCacheCases = []struct {
	name string
	opts alloc.Options
}{{"cached", alloc.Options{}}, {"pin", alloc.Options{NoHostCache: true}}}

// BenchHostAllocPairs is the host cache's benchmark, shared by the
// backends': for each of the cache on ("cached") and off ("pin"), a
// sub-benchmark on a fresh driver from open makes b.N HostAlloc+Close
// pairs of size bytes, and closes the driver.
func BenchHostAllocPairs(b *testing.B, open func(*testing.B) (driver.Driver, error), size int64) {
	for _, tc := range hostCacheCases {
		b.Run(tc.name, func(b *testing.B) {
			d, err := open(b)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			b.SetBytes(size)
			if err := hostAllocPairs(d, tc.opts, size, b.N, b.ResetTimer); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// hostAllocPairs opens an allocator on drv with opts, calls start (a
// benchmark's ResetTimer), makes n HostAlloc+Close pairs of size bytes,
// touching each buffer as an engine staging into it would, and closes
// the allocator.
func hostAllocPairs(drv driver.Driver, opts alloc.Options, size int64, n int, start func()) (err error) {
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
