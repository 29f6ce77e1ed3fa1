// Package collreport is the JSON that cmd/collbench writes (-json) and
// cmd/gpurun reads back into results.json and results.md: one type for
// both sides, so a field added to the benchmark reaches the report.
package collreport

import (
	"cmp"
	"slices"
)

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
	both := measuredBoth(rows, func(r Row) (int, int, bool) {
		if r.Op != "allreduce" || r.Variant != "" {
			return 0, 0, false
		}
		switch r.Alg {
		case "oneshot":
			return r.Ranks, 0, true
		case "twoshot":
			return r.Ranks, 1, true
		}
		return 0, 0, false
	})
	out := map[int]int64{}
	for ranks, sizes := range both {
		var cross int64
		for _, s := range sizes {
			if s.ns[0] > s.ns[1] {
				break
			}
			cross = s.bytes
		}
		out[ranks] = cross
	}
	return out
}

// sizeTimes is one size's replay times of the two things a table
// compares (ns[0] and ns[1]).
type sizeTimes struct {
	bytes int64
	ns    [2]float64
}

// measuredBoth groups the rows that side names (a key, which of the two
// compared things the row times, and whether it counts at all) by key
// and size, and keeps, per key, the sizes measured with both, ascending.
// Failed rows and rows without a replay time never count.
func measuredBoth[K comparable](rows []Row, side func(Row) (key K, which int, ok bool)) map[K][]sizeTimes {
	by := map[K]map[int64]*sizeTimes{}
	for _, r := range rows {
		k, which, ok := side(r)
		if !ok || r.Err != "" || r.CapturedNs <= 0 {
			continue
		}
		if by[k] == nil {
			by[k] = map[int64]*sizeTimes{}
		}
		t := by[k][r.Bytes]
		if t == nil {
			t = &sizeTimes{bytes: r.Bytes}
			by[k][r.Bytes] = t
		}
		t.ns[which] = r.CapturedNs
	}
	out := map[K][]sizeTimes{}
	for k, sizes := range by {
		var both []sizeTimes
		for _, t := range sizes {
			if t.ns[0] > 0 && t.ns[1] > 0 {
				both = append(both, *t)
			}
		}
		if len(both) > 0 {
			slices.SortFunc(both, func(a, b sizeTimes) int { return cmp.Compare(a.bytes, b.bytes) })
			out[k] = both
		}
	}
	return out
}
