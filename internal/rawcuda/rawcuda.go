// Package rawcuda hands the CUDA runtime the cuda backend loaded, raw, to a
// diagnostic that must make calls the Driver never makes: cmd/cudatruth,
// which records what the runtime itself does during a capture. It keeps
// those calls out of package cuda's API, which is the Driver's.
package rawcuda

import "github.com/capalloc/capalloc/internal/gpurt"

// Runtime is one device's runtime as the cuda backend opened it.
type Runtime struct {
	// Runtime is the library: its path, its symbols, Check.
	*gpurt.Runtime
	// Vendor is the ABI's values and the locked-thread runner.
	Vendor *gpurt.Vendor
	// Pool is the device's memory pool, Device its ordinal.
	Pool   uintptr
	Device int
}

// Open opens device 0 with the cuda backend's defaults, as cuda.New does,
// and returns its runtime. Package cuda sets it at init: a program that
// uses it imports cuda.
var Open func() (*Runtime, error)
