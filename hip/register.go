package hip

import (
	"context"
	"fmt"

	"github.com/capalloc/capalloc/alloc"
	"github.com/capalloc/capalloc/backends"
)

// Registered as "hip", with options (config-string names):
//
//	device=0                 HIP device ordinal
//	release_threshold=8GiB   pool release threshold (default: never release)
//	reserve=2GiB             allocate and free this much once at open
//	default_pool=true        use the device's default pool
//	stream_priority=-1       hipStreamCreateWithPriority priority
//	non_blocking=false       blocking streams (default true, as for cuda)
//	no_capture=true          no graph capture; the only way to open a
//	                         runtime older than 5.6
//	ipc=true                 create the pool exportable (POSIX fd handles)
func init() { backends.Register("hip", openWith) }

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

// parseOptions reads config-string options; every error wraps
// backends.ErrInvalidConfig.
func parseOptions(o backends.Options) (Options, error) {
	var opts Options
	if err := o.Check("device", "release_threshold", "reserve", "default_pool", "stream_priority", "non_blocking", "no_capture", "ipc"); err != nil {
		return opts, err
	}
	var err error
	if opts.Device, err = o.Int("device", 0); err != nil {
		return opts, err
	}
	if opts.ReleaseThreshold, err = o.Bytes("release_threshold", 0); err != nil {
		return opts, err
	}
	if opts.Reserve, err = o.Bytes("reserve", 0); err != nil {
		return opts, err
	}
	if opts.DefaultPool, err = o.Bool("default_pool", false); err != nil {
		return opts, err
	}
	if opts.StreamPriority, err = o.Int("stream_priority", 0); err != nil {
		return opts, err
	}
	nonBlocking, err := o.Bool("non_blocking", true)
	if err != nil {
		return opts, err
	}
	opts.Blocking = !nonBlocking
	if opts.NoCapture, err = o.Bool("no_capture", false); err != nil {
		return opts, err
	}
	if opts.IPC, err = o.Bool("ipc", false); err != nil {
		return opts, err
	}
	if err := vendor.Validate(opts.core()); err != nil {
		return opts, fmt.Errorf("%w: %w", backends.ErrInvalidConfig, err)
	}
	return opts, nil
}
