package cuda

import (
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
)

// Registered as "cuda", with options (config-string names):
//
//	device=0                 CUDA device ordinal
//	release_threshold=8GiB   pool release threshold (default: never release)
//	reserve=2GiB             allocate and free this much once at open
//	default_pool=true        use the device's default pool
//	stream_priority=-1       cudaStreamCreateWithPriority priority
//	non_blocking=false       blocking streams, which sync with the legacy
//	                         stream (default true: see Options.Blocking
//	                         for what blocking streams cost under capture)
//	ipc=true                 create the pool exportable (POSIX fd handles)
func init() {
	driver.Register("cuda", gpurt.Opener(parseOptions, func(o *Options) *driver.HostMemory { return &o.HostMemory }, New))
}

// parseOptions reads config-string options (gpurt.ParseOptions); every
// error wraps driver.ErrInvalidConfig.
func parseOptions(o driver.Options) (Options, error) {
	opts, _, err := gpurt.ParseOptions(o)
	if err != nil {
		return Options{}, err
	}
	return opts, vendor.ValidateConfig(opts)
}
