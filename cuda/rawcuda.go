package cuda

import (
	"github.com/capalloc/capalloc/internal/gpurt"
	"github.com/capalloc/capalloc/internal/rawcuda"
)

// The runtime, raw, for cmd/cudatruth's probe (internal/rawcuda). The
// Driver it opens stays idle.
func init() {
	rawcuda.Open = func() (*rawcuda.Runtime, error) {
		d, err := New(Options{})
		if err != nil {
			return nil, err
		}
		return &rawcuda.Runtime{Runtime: &d.rt.Runtime, Vendor: &vendor, Pool: gpurt.Pool(d.core), Device: d.opts.Device}, nil
	}
}
