package alloc

import "strconv"

// Summary is the allocator's memory as text, PyTorch's
// torch.cuda.memory_summary: device memory by pool (small, large, sync,
// graph) and by block state, current and peak bytes, allocations and
// frees, out-of-memory errors and reclaim retries, the largest free block
// and the fragmentation (reserved over in use). It is a Snapshot's
// (memmap.Snapshot.Summary, which allocview's summary.txt serves too),
// with its cost; a closed allocator's says it is closed.
func (a *Allocator) Summary() string {
	s, err := a.Snapshot()
	if err != nil {
		return "capalloc memory summary: allocator " + strconv.Quote(a.name) + ": " + err.Error() + "\n"
	}
	return s.Summary()
}
