// Package collreport is the JSON that cmd/collbench writes (-json) and
// cmd/gpurun reads back into results.json and results.md: one type for
// both sides, so a field added to the benchmark reaches the report.
package collreport

import "slices"

// Row is one case's figures on one number of ranks.
type Row struct {
	Ranks int    `json:"ranks"`
	Case  string `json:"case"`
	Op    string `json:"op"`
	Alg   string `json:"alg,omitempty"`
	// Variant is the variant a row forced ("general", "aligned" kernels;
	// "copy" the copy engines: CopyVariant;
	// "" the default dispatch: the aligned variant where the operands
	// allow, as for every tensor collbench allocates).
	Variant         string  `json:"variant,omitempty"`
	Bytes           int64   `json:"bytes"`
	Replays         int     `json:"replays"`
	CapturedNs      float64 `json:"captured_ns"`
	EagerNs         float64 `json:"eager_ns"`
	EmptyNs         float64 `json:"empty_ns"`
	OverEmpty       float64 `json:"over_empty"`
	BusBWGBps       float64 `json:"busbw_GBps"`
	TrafficGBps     float64 `json:"traffic_GBps"`
	BWOverCopy      float64 `json:"bw_over_copy"`
	CapturedOverEag float64 `json:"captured_over_eager"`
	Err             string  `json:"error,omitempty"`
}

// Report is the whole run.
type Report struct {
	Backend    string          `json:"backend"`
	Device     string          `json:"device"`
	Small      bool            `json:"small"`
	CopyBytes  int64           `json:"copy_bytes"`
	CopyGBps   float64         `json:"copy_GBps"` // read + write traffic per second
	EmptyNs    map[int]float64 `json:"empty_ns"`  // by rank count
	Rows       []Row           `json:"rows"`
	Failed     int             `json:"failed"`
	SkipReason string          `json:"skipped,omitempty"`
}

// OneShotCrossover is, per rank count, the largest all-reduce the report
// measured the one-shot replay no slower than the two-shot at, at that
// size and every smaller one measured with both (0: the two-shot was
// faster at the smallest). Failed rows and rows of an explicit kernel
// variant (the default dispatch is what Auto serves) do not count.
func OneShotCrossover(rows []Row) map[int]int64 {
	type pair struct{ one, two float64 }
	by := map[int]map[int64]*pair{}
	for _, r := range rows {
		if r.Op != "allreduce" || r.Err != "" || r.Variant != "" || r.CapturedNs <= 0 {
			continue
		}
		if by[r.Ranks] == nil {
			by[r.Ranks] = map[int64]*pair{}
		}
		p := by[r.Ranks][r.Bytes]
		if p == nil {
			p = &pair{}
			by[r.Ranks][r.Bytes] = p
		}
		switch r.Alg {
		case "oneshot":
			p.one = r.CapturedNs
		case "twoshot":
			p.two = r.CapturedNs
		}
	}
	out := map[int]int64{}
	for ranks, sizes := range by {
		var both []int64
		for b, p := range sizes {
			if p.one > 0 && p.two > 0 {
				both = append(both, b)
			}
		}
		if len(both) == 0 {
			continue
		}
		slices.Sort(both)
		var cross int64
		for _, b := range both {
			if sizes[b].one > sizes[b].two {
				break
			}
			cross = b
		}
		out[ranks] = cross
	}
	return out
}
