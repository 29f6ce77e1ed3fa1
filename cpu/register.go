package cpu

import (
	"context"
	"fmt"

	"github.com/capalloc/capalloc/alloc/driver"
)

// Registered as "cpu", with options (config-string names):
//
//	memory_limit=4GiB       device memory size (default DefaultMemoryLimit)
//	host_memory_limit=1GiB  pinned host memory cap (default: memory_limit)
//	no_capture=true         emulate a device without graph support
//	profile=gb10            emulate NVIDIA GB10's safety profile (strict)
//	capture_safety=strict   override the profile's capture safety
//	                        (strict or documented: docs/capture-safety.md)
//
// The Memory.Host handed to the opener, when set, backs HostAlloc; its Memory.Device
// backs device allocations (the plugin server passes shared memory).
func init() { driver.Register("cpu", openWith) }

func openWith(ctx context.Context, o driver.Options, mem driver.Memory) (driver.Driver, error) {
	if err := o.Check("memory_limit", "host_memory_limit", "no_capture", "profile", "capture_safety"); err != nil {
		return nil, err
	}
	var opts Options
	var err error
	if opts.MemoryLimit, err = o.Bytes("memory_limit", 0); err != nil {
		return nil, err
	}
	if opts.HostMemoryLimit, err = o.Bytes("host_memory_limit", 0); err != nil {
		return nil, err
	}
	if opts.NoCapture, err = o.Bool("no_capture", false); err != nil {
		return nil, err
	}
	opts.Profile = o.Get("profile", "")
	if opts.Profile != "" && opts.Profile != ProfileGB10 {
		return nil, fmt.Errorf("%w: cpu: profile %q: want %q", driver.ErrInvalidConfig, opts.Profile, ProfileGB10)
	}
	if opts.CaptureSafety, err = o.CaptureSafety(); err != nil {
		return nil, err
	}
	opts.HostMemory = mem.Host
	opts.DeviceMemory = mem.Device
	d, err := New(opts)
	if err != nil {
		return nil, err // not a nil *Driver in a non-nil interface
	}
	return d, nil
}
