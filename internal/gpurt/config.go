package gpurt

import (
	"context"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// ParseOptions reads the config-string options both drivers take:
//
//	device=0                 device ordinal
//	release_threshold=8GiB   pool release threshold (default: never release)
//	reserve=2GiB             allocate and free this much once at open
//	default_pool=true        use the device's default pool
//	stream_priority=-1       stream priority
//	non_blocking=false       blocking streams (default true)
//	ipc=true                 create the pool exportable (POSIX fd handles)
//	capture_safety=strict    strict or documented: overrides the device's
//	                         classification (docs/capture-safety.md)
//
// and the vendor's own boolean keys, extraBools (default false), read
// after non_blocking and returned by name. Unknown keys are refused.
// Every error wraps driver.ErrInvalidConfig; the options are not
// validated here (ValidateConfig, once the vendor has read its own).
func ParseOptions(o driver.Options, extraBools ...string) (Options, map[string]bool, error) {
	var opts Options
	extra := map[string]bool{}
	keys := []string{"device", "release_threshold", "reserve", "default_pool", "stream_priority", "non_blocking"}
	keys = append(append(keys, extraBools...), "ipc", "capture_safety")
	if err := o.Check(keys...); err != nil {
		return opts, extra, err
	}
	var err error
	if opts.Device, err = o.Int("device", 0); err != nil {
		return opts, extra, err
	}
	if opts.ReleaseThreshold, err = o.Bytes("release_threshold", 0); err != nil {
		return opts, extra, err
	}
	if opts.Reserve, err = o.Bytes("reserve", 0); err != nil {
		return opts, extra, err
	}
	if opts.DefaultPool, err = o.Bool("default_pool", false); err != nil {
		return opts, extra, err
	}
	if opts.StreamPriority, err = o.Int("stream_priority", 0); err != nil {
		return opts, extra, err
	}
	nonBlocking, err := o.Bool("non_blocking", true)
	if err != nil {
		return opts, extra, err
	}
	opts.Blocking = !nonBlocking
	for _, k := range extraBools {
		if extra[k], err = o.Bool(k, false); err != nil {
			return opts, extra, err
		}
	}
	if opts.IPC, err = o.Bool("ipc", false); err != nil {
		return opts, extra, err
	}
	if opts.CaptureSafety, err = o.CaptureSafety(); err != nil {
		return opts, extra, err
	}
	return opts, extra, nil
}

// ValidateConfig is Validate for options read from a config string: the
// error wraps driver.ErrInvalidConfig too.
func (v *Vendor) ValidateConfig(o Options) error {
	if err := v.Validate(o); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrInvalidConfig, err)
	}
	return nil
}

// Opener is a vendor driver's driver.Opener: its options parsed from the
// config string (parse), the host memory handed to it (the plugin
// server's shared memory, if any) set where host says, then open.
func Opener[O any, D driver.Driver](parse func(driver.Options) (O, error), host func(*O) *driver.HostMemory, open func(O) (D, error)) driver.Opener {
	return func(ctx context.Context, o driver.Options, mem driver.Memory) (driver.Driver, error) {
		opts, err := parse(o)
		if err != nil {
			return nil, err
		}
		*host(&opts) = mem.Host
		d, err := open(opts)
		if err != nil {
			return nil, err // not a nil *Driver in a non-nil interface
		}
		return d, nil
	}
}
