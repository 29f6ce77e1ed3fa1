package cuda

import (
	"context"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
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
func init() { backends.Register("cuda", openWith) }

func openWith(ctx context.Context, c backends.Choice) (alloc.Driver, error) {
	opts, err := parseOptions(c.Options)
	if err != nil {
		return nil, err
	}
	opts.HostMemory = c.Memory.Host // the plugin server's shared memory, if any
	d, err := New(opts)
	if err != nil {
		return nil, err // not a nil *Driver in a non-nil interface
	}
	return d, nil
}

// parseOptions reads config-string options (gpurt.ParseOptions); every
// error wraps backends.ErrInvalidConfig.
func parseOptions(o backends.Options) (Options, error) {
	c, _, err := gpurt.ParseOptions(o)
	if err != nil {
		return Options{}, err
	}
	opts := Options(c)
	return opts, vendor.ValidateConfig(c)
}
