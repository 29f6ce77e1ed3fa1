package collreport

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
	type key struct {
		op    string
		ranks int
	}
	both := measuredBoth(rows, func(r Row) (key, int, bool) {
		if r.Op != "allgather" && r.Op != "alltoall" {
			return key{}, 0, false
		}
		switch r.Variant {
		case "":
			return key{r.Op, r.Ranks}, 0, true
		case CopyVariant:
			return key{r.Op, r.Ranks}, 1, true
		}
		return key{}, 0, false
	})
	out := map[string]map[int]int64{}
	for k, sizes := range both {
		from := int64(-1)
		for i := len(sizes) - 1; i >= 0 && sizes[i].ns[1] < sizes[i].ns[0]; i-- {
			from = sizes[i].bytes
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
