// Package collreport is the JSON that cmd/collbench writes (-json) and
// cmd/gpurun reads back into results.json and results.md: one type for
// both sides, so a field added to the benchmark reaches the report.
package collreport

// Row is one case's figures on one number of ranks.
type Row struct {
	Ranks           int     `json:"ranks"`
	Case            string  `json:"case"`
	Op              string  `json:"op"`
	Alg             string  `json:"alg,omitempty"`
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
