package backends

import "context"

// DeviceMemory supplies the memory behind a backend's device allocations,
// with HostMemory's contract (Alloc returns zeroed memory, Free takes it
// back exactly as returned). Only a backend whose device memory is host
// memory (cpu) can take it. The plugin server passes one backed by shared
// memory (memfd), so the engine's process can read and write device bytes
// itself: a pageable blocking copy is then one memcpy instead of two.
type DeviceMemory = HostMemory

type deviceMemoryKey struct{}

// WithDeviceMemory returns ctx carrying dm, for a Factory to find with
// DeviceMemoryFrom.
func WithDeviceMemory(ctx context.Context, dm DeviceMemory) context.Context {
	return context.WithValue(ctx, deviceMemoryKey{}, dm)
}

// DeviceMemoryFrom returns the DeviceMemory ctx carries, or nil: the
// backend then uses its own.
func DeviceMemoryFrom(ctx context.Context) DeviceMemory {
	dm, _ := ctx.Value(deviceMemoryKey{}).(DeviceMemory)
	return dm
}
