package hip

import (
	"github.com/capalloc/capalloc/alloc/driver"
	"github.com/capalloc/capalloc/internal/gpurt"
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
func init() {
	driver.Register("hip", gpurt.Opener(parseOptions, func(o *Options) *driver.HostMemory { return &o.HostMemory }, New))
}

// parseOptions reads config-string options (gpurt.ParseOptions, and
// no_capture); every error wraps driver.ErrInvalidConfig.
func parseOptions(o driver.Options) (Options, error) {
	c, extra, err := gpurt.ParseOptions(o, "no_capture")
	opts := Options{
		Device: c.Device, ReleaseThreshold: c.ReleaseThreshold, Reserve: c.Reserve, DefaultPool: c.DefaultPool,
		StreamPriority: c.StreamPriority, Blocking: c.Blocking, NoCapture: extra["no_capture"], IPC: c.IPC,
		CaptureSafety: c.CaptureSafety,
	}
	if err != nil {
		return opts, err
	}
	return opts, vendor.ValidateConfig(c)
}
