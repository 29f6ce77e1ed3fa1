package collreport

import "slices"

// CopyVariant is the Variant of the rows that force the copy-engine
// variant of an all-gather or all-to-all (symheap.CopyEngine).
const CopyVariant = "copy"

// CopyEngineFrom is, per collective (allgather, alltoall) and rank count,
// the smallest size from which the report measured the copy-engine
// replay (Variant CopyVariant) faster than the kernels' (the kernel rows
// of the heap's own dispatch, Variant ""), at that size and every larger
// one measured with both. A collective and rank count where the copy
// engines were not faster at the largest such size has no entry (Auto
// keeps the kernels); failed rows do not count.
func CopyEngineFrom(rows []Row) map[string]map[int]int64 {
	type pair struct{ kernel, copy float64 }
	type key struct {
		op    string
		ranks int
	}
	by := map[key]map[int64]*pair{}
	for _, r := range rows {
		if (r.Op != "allgather" && r.Op != "alltoall") || r.Err != "" || r.CapturedNs <= 0 || (r.Variant != "" && r.Variant != CopyVariant) {
			continue
		}
		k := key{r.Op, r.Ranks}
		if by[k] == nil {
			by[k] = map[int64]*pair{}
		}
		p := by[k][r.Bytes]
		if p == nil {
			p = &pair{}
			by[k][r.Bytes] = p
		}
		if r.Variant == CopyVariant {
			p.copy = r.CapturedNs
		} else {
			p.kernel = r.CapturedNs
		}
	}
	out := map[string]map[int]int64{}
	for k, sizes := range by {
		var both []int64
		for b, p := range sizes {
			if p.kernel > 0 && p.copy > 0 {
				both = append(both, b)
			}
		}
		slices.Sort(both)
		from := int64(-1)
		for i := len(both) - 1; i >= 0 && sizes[both[i]].copy < sizes[both[i]].kernel; i-- {
			from = both[i]
		}
		if from < 0 {
			continue
		}
		if out[k.op] == nil {
			out[k.op] = map[int]int64{}
		}
		out[k.op][k.ranks] = from
	}
	return out
}
