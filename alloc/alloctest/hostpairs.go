package alloctest

import "github.com/capalloc/capalloc/alloc"

// HostAllocPairs makes n HostAlloc+Close pairs of size bytes on a: the
// host cache's benchmark (from the cache, or a fresh pin each time with
// alloc.Options.NoHostCache), shared by the backends' benchmarks.
func HostAllocPairs(a *alloc.Allocator, size int64, n int) error {
	for range n {
		h, err := a.HostAlloc(size)
		if err != nil {
			return err
		}
		h.Bytes()[0] = 1 // touch it, as an engine staging into it would
		if err := h.Close(); err != nil {
			return err
		}
	}
	return nil
}
